"""The serving-economics analysis: each schedule's compute saved at matched quality over seeds,
the paired differences the config names, and which exit rule is best for which schedule.

Computed from the per-run summaries of report.json alone (`run_summary` makes one from a run's
frontier document), so the report is remade from that file. Every interval is 95% over training
seeds (`stats.evidence`: a t-interval of the seeds' values, or of the same-seed differences);
each seed's frontier is measured on its own held-out draw, so the interval covers that sampling
too. The primary comparisons, named in the config before the runs, are each decided by their own
interval; every other difference (the rest of the comparisons, and each schedule's best rule
against its runner-up) is exploratory, and Holm's method corrects the family (`kit/claims.py`).
A difference whose interval holds zero is "cannot tell".

What exiting itself saves (issue 70): "saved" divides by each run's best fixed depth, an argmax
over a flat curve that differs from run to run, so most of it is a shallower fixed depth
matching that best one. Two quantities measure exiting against a reference every run shares:
`saved_by_exit`, the share of the shallowest fixed depth that matches (the plateau's first depth)
that exiting saves, and `least`, the least recurrent iterations per token at matched quality, in
iterations (the best fixed depth times 1 - saved). Both come from each run's summary; they were
chosen after the runs, so their differences are exploratory.
"""

from __future__ import annotations

from typing import Any

from fixedfirst.stats.evidence import common_seeds, over_seeds, paired, sign
from fixedfirst.studies.kit.claims import correct_family, primary_verdict
from fixedfirst.studies.serving.frontier_report import short
from fixedfirst.studies.serving.settings import COMPUTES, QUANTITIES

LEAST = "least"
"""The least recurrent iterations per token at matched quality (iterations, not a share)."""
MEASURES = (*((c, q) for c in COMPUTES for q in QUANTITIES), ("iterations", LEAST))
"""(compute, quantity) of every difference a comparison computes, in the report's order."""


def run_summary(document: dict[str, Any], arm: str, seed: int) -> dict[str, Any]:
    """What the analysis reads of one run's frontier document."""
    points, matched = document["points"], document["matched"]
    by = {}
    for compute in COMPUTES:
        m = matched["by"][compute]
        by[compute] = {
            "saved": m["saved"],
            "saved_by_exit": m["saved_by_exit"],
            "at": short(points[m["point"]]),
            "cheapest_fixed": points[m["cheapest_fixed"]]["max_depth"],
            "rules": {
                rule: {
                    "saved": r["saved"],
                    "saved_by_exit": r["saved_by_exit"],
                    "threshold": None if r["point"] is None else points[r["point"]]["threshold"],
                }
                for rule, r in m["rules"].items()
            },
        }
    best = points[matched["best_fixed"]]
    return {
        "arm": arm,
        "seed": seed,
        "step": document["step"],
        "schedule": document["schedule"],
        "quality": document["quality"]["name"],
        "best_fixed_depth": best["max_depth"],
        "best_quality": best["quality"],
        "target": matched["target"],
        "speedup": matched["speedup"],
        "by": by,
    }


def _values(runs: dict[int, dict[str, Any]], compute: str, quantity: str) -> dict[int, float]:
    if quantity == LEAST:  # iterations per token: the best fixed depth's, less what is saved
        return {
            s: r["best_fixed_depth"] * (1.0 - r["by"]["iterations"]["saved"])
            for s, r in runs.items()
        }
    return {seed: r["by"][compute][quantity] for seed, r in runs.items()}


def _difference(a: dict[int, float], b: dict[int, float]) -> dict[str, Any] | None:
    """a - b paired by seed, with its sign; None with fewer than two common seeds."""
    if len(common_seeds(a, b)) < 2:
        return None
    interval = paired(a, b)
    return {**interval.to_dict(), "sign": sign(interval)}


def arm_summary(runs: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """One arm over its seeds: each quantity's mean and interval, each rule's saving (the
    iterations it saves against the best fixed depth), the best rule and its lead."""
    cells = {
        compute: {q: over_seeds(_values(runs, compute, q)).to_dict() for q in QUANTITIES}
        for compute in COMPUTES
    }
    first = next(iter(runs.values()))
    rule_values = {
        rule: {seed: r["by"]["iterations"]["rules"][rule]["saved"] for seed, r in runs.items()}
        for rule in first["by"]["iterations"]["rules"]
    }
    rules = {rule: over_seeds(v).to_dict() for rule, v in rule_values.items()}
    ranked = sorted(rules, key=lambda rule: -rules[rule]["mean"])
    lead = None
    if len(ranked) > 1:
        lead = _difference(rule_values[ranked[0]], rule_values[ranked[1]])
    floor = {s: float(r["by"]["iterations"]["cheapest_fixed"]) for s, r in runs.items()}
    return {
        "seeds": sorted(runs),
        "by": cells,
        "least": over_seeds(_values(runs, "iterations", LEAST)).to_dict(),
        "shallowest_matching_depth": over_seeds(floor).to_dict(),
        "rules": rules,
        "best_rule": ranked[0] if ranked else None,
        "runner_up": ranked[1] if len(ranked) > 1 else None,
        "lead": lead,
        "best_fixed_depths": {str(s): r["best_fixed_depth"] for s, r in sorted(runs.items())},
    }


def analyse(numbers: dict[str, Any]) -> dict[str, Any]:
    """Every study's arms, the configured comparisons in each study that has both arms, the
    primaries' verdicts and the exploratory family's Holm verdicts."""
    studies: dict[str, Any] = {}
    differences: list[dict[str, Any]] = []
    for study in numbers["studies"]:
        name = study["name"]
        runs = numbers["runs"].get(name, {})
        by_arm = {
            arm: {r["seed"]: r for r in runs.values() if r["arm"] == arm} for arm in study["arms"]
        }
        arms = {arm: arm_summary(seeds) for arm, seeds in by_arm.items() if seeds}
        studies[name] = {"arms": arms}
        for c in numbers["comparisons"]:
            if c["a"] not in arms or c["b"] not in arms:
                continue
            for compute, quantity in MEASURES:
                a = _values(by_arm[c["a"]], compute, quantity)
                b = _values(by_arm[c["b"]], compute, quantity)
                found = _difference(a, b)
                if found is not None:
                    key = {"study": name, "a": c["a"], "b": c["b"]}
                    differences.append({**key, "compute": compute, "quantity": quantity, **found})
    primary = []
    for p in numbers["primary"]:
        match = next(
            (
                d
                for d in differences
                if (d["study"], d["a"], d["b"], d["compute"], d["quantity"])
                == (p["study"], p["a"], p["b"], p["compute"], p["quantity"])
            ),
            None,
        )
        verdict = None if match is None else primary_verdict(match["low"], match["high"], None)
        primary.append({**p, "difference": match, "verdict": verdict})
    chosen = [p["difference"] for p in primary if p["difference"] is not None]
    exploratory = [d for d in differences if not any(d is c for c in chosen)]
    for name, study in studies.items():
        for arm, summary in study["arms"].items():
            if summary["lead"] is not None:
                exploratory.append(
                    {
                        "study": name,
                        "a": f"{arm}: {summary['best_rule']}",
                        "b": f"{arm}: {summary['runner_up']}",
                        "compute": "iterations",
                        "quantity": "saved",
                        **summary["lead"],
                    }
                )
    if exploratory:
        correct_family(exploratory)
    return {"studies": studies, "primary": primary, "exploratory": exploratory}
