"""Reading an exit frontier: which points are Pareto-optimal, and the least compute that matches
the model's best fixed depth.

A point is one way of serving a model (a fixed depth, or an exit rule at one threshold) with
what it was measured to cost and give (`serve/frontier.py`): as a JSON-ready dict with
`mean_depth` (recurrent iterations per token), `gflops` (modeled forward FLOPs per token, a
readout per iteration for a rule that reads out), `quality`, and `rule` (None for a fixed
depth). Everything here is computed from such dicts alone, so a report made from a committed
frontier JSON recomputes it exactly.

Matched quality (the serving guide): the target is the best fixed depth's quality within a
tolerance (0.5% of its NLL, or 1 accuracy point); the least compute that meets it, over every
point, against the best fixed depth's compute is "compute saved at matched quality". What
exiting adds beyond serving at the cheapest fixed depth that meets the target is measured
against that depth; a server that has a rule can always fall back to a fixed depth, so a rule
that never beats one adds nothing (0), never a loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

COMPUTE = {"iterations": "mean_depth", "flops": "gflops"}
"""The two measures of compute: recurrent iterations per token, and modeled forward FLOPs."""
Compute = Literal["iterations", "flops"]


@dataclass(frozen=True)
class QualityMeasure:
    """What a point's quality is and how near the best is near enough."""

    name: str
    """As the tables head it: "NLL", "accuracy"."""
    unit: str
    better: Literal["lower", "higher"]
    tolerance: float
    """How far from the best fixed depth still matches it: a share of it (relative) or an
    amount (absolute)."""
    relative: bool

    def __post_init__(self) -> None:
        if self.better not in ("lower", "higher"):
            raise ValueError(f"better must be 'lower' or 'higher', got {self.better!r}")
        if not self.tolerance >= 0:
            raise ValueError(f"the tolerance must be >= 0, got {self.tolerance}")

    def target(self, best: float) -> float:
        """The worst quality that still matches `best`."""
        step = abs(best) * self.tolerance if self.relative else self.tolerance
        return best + step if self.better == "lower" else best - step

    def meets(self, quality: float, target: float) -> bool:
        return quality <= target if self.better == "lower" else quality >= target

    def improves(self, a: float, b: float) -> bool:
        """Whether quality `a` is strictly better than `b`."""
        return a < b if self.better == "lower" else a > b

    def describe_tolerance(self) -> str:
        if self.relative:
            return f"within {self.tolerance:.1%} of"
        return f"within {self.tolerance:g} of"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> QualityMeasure:
        return cls(**value)


def pareto_front(points: Sequence[dict[str, Any]], measure: QualityMeasure) -> list[int]:
    """Indices of the points no other point dominates in (recurrent iterations, quality):
    as cheap or cheaper and as good or better, one of them strictly. Ascending in compute."""
    front = []
    for i, p in enumerate(points):
        dominated = any(
            q["mean_depth"] <= p["mean_depth"]
            and not measure.improves(p["quality"], q["quality"])
            and (q["mean_depth"] < p["mean_depth"] or measure.improves(q["quality"], p["quality"]))
            for j, q in enumerate(points)
            if j != i
        )
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: (points[i]["mean_depth"], i))


def best_fixed(points: Sequence[dict[str, Any]], measure: QualityMeasure) -> int:
    """Index of the fixed depth with the best quality (the shallowest of equals)."""
    fixed = [i for i, p in enumerate(points) if p["rule"] is None]
    if not fixed:
        raise ValueError("a frontier needs at least one fixed depth")
    best = fixed[0]
    for i in fixed[1:]:
        p, b = points[i], points[best]
        if measure.improves(p["quality"], b["quality"]) or (
            p["quality"] == b["quality"] and p["mean_depth"] < b["mean_depth"]
        ):
            best = i
    return best


def cheapest(points: Sequence[dict[str, Any]], indices: Sequence[int], key: str) -> int | None:
    """The index among `indices` with the least `key` (the earliest of equals); None if none."""
    return min(indices, key=lambda i: (points[i][key], i), default=None)


def matched_quality(points: Sequence[dict[str, Any]], measure: QualityMeasure) -> dict[str, Any]:
    """The best fixed depth, the target, and for each measure of compute (`COMPUTE`) the least
    compute that meets the target: over every point, over the fixed depths, and over each rule's
    thresholds (None where none of them does), with the savings they give."""
    best = best_fixed(points, measure)
    target = measure.target(points[best]["quality"])
    meeting = [i for i, p in enumerate(points) if measure.meets(p["quality"], target)]
    rules = list(dict.fromkeys(p["rule"] for p in points if p["rule"] is not None))
    by = {}
    for compute, key in COMPUTE.items():
        least = cheapest(points, meeting, key)
        fixed = cheapest(points, [i for i in meeting if points[i]["rule"] is None], key)
        assert least is not None and fixed is not None  # the best fixed depth meets its target
        reference, floor, lowest = (points[i][key] for i in (best, fixed, least))
        by_rule = {}
        for rule in rules:
            own = cheapest(points, [i for i in meeting if points[i]["rule"] == rule], key)
            with_fixed = floor if own is None else min(floor, points[own][key])
            by_rule[rule] = {
                "point": own,
                "saved": 1.0 - with_fixed / reference,
                "saved_by_exit": 1.0 - with_fixed / floor,
            }
        by[compute] = {
            "point": least,
            "cheapest_fixed": fixed,
            "saved": 1.0 - lowest / reference,
            "saved_by_exit": 1.0 - lowest / floor,
            "rules": by_rule,
        }
    fast, slow = (points[i].get("tokens_per_s") for i in (by["iterations"]["point"], best))
    return {
        "best_fixed": best,
        "target": target,
        "meeting": meeting,
        "speedup": None if fast is None or slow is None else fast / slow,
        "by": by,
    }


def best_rule(matched: dict[str, Any], compute: Compute = "iterations") -> str | None:
    """The rule whose least compute at matched quality is lowest (None when no rule meets the
    target at any threshold); the first listed of equals."""
    rules = matched["by"][compute]["rules"]
    reached = [r for r, v in rules.items() if v["point"] is not None]
    return max(reached, key=lambda r: rules[r]["saved"], default=None)
