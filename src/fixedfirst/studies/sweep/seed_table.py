"""The sweep over seeds: one row per [[runs]] entry, each number a mean with its interval.

With `[sweep] seeds`, every [[runs]] entry (a group) ran once per seed. A group's row gives, for
the sweep's metric (mean serving NLL, or the task's score averaged over serving depths 1..16)
and for the metric at serving depths 1, 4, 16 and 64: the mean over seeds with its 95%
t-interval (`evidence.over_seeds`), and the paired relative difference to the reference group,
seed by seed (`evidence.paired_relative`: a[s] / b[s] - 1, then its mean and interval). Beside
them the group's modeled savings and mean wall-clock, and the wall-clock savings against the
reference group's mean wall-clock.
"""

from __future__ import annotations

from typing import Any

from fixedfirst.stats.evidence import LEVEL, common_seeds, over_seeds, paired_relative
from fixedfirst.studies.sweep.results import by_depth, headline

SEED_DEPTHS = (1, 4, 16, 64)
"""Serving depths of the seed table (results.json's rows hold every evaluated depth)."""


def group_values(
    rows: list[dict[str, Any]], group: str, metric: str, depth: int | None = None
) -> dict[int, float]:
    """seed -> the group's metric: its mean over serving depths 1..16, or its value at `depth`."""
    return {
        int(r["seed"]): headline(r, metric) if depth is None else by_depth(r, metric)[depth]
        for r in rows
        if r["group"] == group
    }


def quantity_name(metric: str, score_name: str | None, depth: int | None = None) -> str:
    """What a number of the metric is, in words: "mean serving NLL", "NLL at K=4", ..."""
    if metric == "task":
        name = score_name or "task score"
        return f"mean {name} over K=1..16" if depth is None else f"{name} at K={depth}"
    return "mean serving NLL" if depth is None else f"NLL at K={depth}"


def what_intervals_cover(metric: str, shared_rows: bool = False) -> str:
    """One sentence for a legend: what varies from seed to seed (docs/design.md §4), and whether
    the held-out rows do (`shared_rows`: every run scored one set drawn once)."""
    if metric == "task":
        return (
            "The intervals cover what a seed changes in training (initialisation, data order, "
            "the depths drawn); the task's evaluation set is the same for every seed, so its "
            "sampling is not in them."
        )
    if shared_rows:
        return (
            "Every run is scored on the same held-out rows, drawn once: an interval over seeds "
            "covers what a seed changes in training (initialisation, data order, the depths "
            "drawn), and one crossed over the seeds and the set's blocks covers the rows' "
            "sampling too."
        )
    return (
        "The intervals cover what a seed changes: initialisation, data order, the depths drawn, "
        "and the validation rows the NLL is measured on (drawn per seed, the same for every "
        "entry)."
    )


def _relative_to(values: dict[int, float], reference: dict[int, float]) -> dict[str, Any] | None:
    """The paired relative difference to the reference's same seeds (None without two, or where
    the reference scored 0: no ratio)."""
    seeds = common_seeds(values, reference)
    if len(seeds) < 2 or any(reference[s] == 0 for s in seeds):
        return None
    return paired_relative(values, reference).to_dict()


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def seed_groups(
    rows: list[dict[str, Any]], reference_group: str | None, metric: str
) -> list[dict[str, Any]]:
    """One entry per group, in the rows' order: the numbers of the seed table."""
    groups = list(dict.fromkeys(r["group"] for r in rows))
    ref_walls = [r["wall"] for r in rows if r["group"] == reference_group]
    ref_wall = _mean(ref_walls) if ref_walls else 0.0

    def summary(group: str, depth: int | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The group's metric over seeds, and relative to the reference entry (not itself)."""
        values = group_values(rows, group, metric, depth)
        if reference_group is None or reference_group not in groups or group == reference_group:
            return over_seeds(values).to_dict(), None
        reference = group_values(rows, reference_group, metric, depth)
        return over_seeds(values).to_dict(), _relative_to(values, reference)

    entries = []
    for group in groups:
        runs = [r for r in rows if r["group"] == group]
        measured = set.intersection(*(set(by_depth(r, metric)) for r in runs))
        metric_over_seeds, metric_vs_reference = summary(group, None)
        depths = {}
        for depth in (d for d in SEED_DEPTHS if d in measured):
            at, vs = summary(group, depth)
            depths[str(depth)] = {"over_seeds": at, "vs_reference": vs}
        wall = over_seeds({int(r["seed"]): r["wall"] for r in runs}).to_dict()
        entries.append(
            {
                "group": group,
                "schedule": runs[0]["schedule"],
                "seeds": sorted(int(r["seed"]) for r in runs),
                "n": len(runs),
                "metric": metric_over_seeds,
                "metric_vs_reference": metric_vs_reference,
                "by_depth": depths,
                "modeled_savings": _mean([r["modeled_savings"] for r in runs]),
                "wall": wall,
                "wall_savings": 1.0 - wall["mean"] / ref_wall if ref_wall > 0 else None,
            }
        )
    return entries


def _over_seeds(summary: dict[str, Any], digits: int) -> str:
    mean = f"{summary['mean']:.{digits}f}"
    if summary["low"] is None:
        return mean
    return f"{mean} [{summary['low']:.{digits}f}, {summary['high']:.{digits}f}]"


def _relative(interval: dict[str, Any] | None) -> str:
    if interval is None:
        return "–"
    return (
        f"{100 * interval['mean']:+.2f}% "
        f"[{100 * interval['low']:+.2f}, {100 * interval['high']:+.2f}]"
    )


def seed_table_markdown(
    groups: list[dict[str, Any]],
    reference_group: str | None,
    metric: str,
    score_name: str | None,
    shared_rows: bool = False,
) -> str:
    """The seed table with a legend saying what each number is and what its interval covers
    (its intervals are over seeds only, whether or not the held-out rows are shared)."""
    digits = 3 if metric == "task" else 4
    head = quantity_name(metric, score_name)
    columns = [
        "entry",
        "seeds",
        "modeled savings",
        "wall-clock (s)",
        "wall-clock savings",
        head,
        "vs reference",
    ]
    for depth in SEED_DEPTHS:
        columns += [quantity_name(metric, score_name, depth), "vs reference"]
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for g in groups:
        name = f"**{g['group']}** (reference)" if g["group"] == reference_group else g["group"]
        cells = [
            name,
            str(g["n"]),
            f"{100 * g['modeled_savings']:.1f}%",
            _over_seeds(g["wall"], 1),
            "–" if g["wall_savings"] is None else f"{100 * g['wall_savings']:.1f}%",
            _over_seeds(g["metric"], digits),
            _relative(g["metric_vs_reference"]),
        ]
        for depth in SEED_DEPTHS:
            at = g["by_depth"].get(str(depth))
            cells += (
                ["–", "–"]
                if at is None
                else [
                    _over_seeds(at["over_seeds"], digits),
                    _relative(at["vs_reference"]),
                ]
            )
        lines.append("| " + " | ".join(cells) + " |")
    against = (
        f"the reference entry `{reference_group}`"
        if reference_group
        else "no reference (the sweep names none)"
    )
    lines += [
        "",
        f"Each [[runs]] entry over its seeds (n of them): every number is the mean over seeds "
        f"with its two-sided {LEVEL:.0%} t-interval in brackets (none for a single seed). "
        f'"vs reference": the paired relative difference to {against}, a[s] / b[s] - 1 for '
        "each seed both ran, then its mean and interval, in %. Modeled savings: the mean over "
        "seeds of the schedule's modeled savings; wall-clock: training steps only, its savings "
        "1 - the mean wall-clock / the reference's. " + what_intervals_cover(metric, shared_rows),
    ]
    return "\n".join(lines) + "\n"
