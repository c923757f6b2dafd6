"""The auto-switch study (docs/studies/auto-switch.md): fixed switch fractions against auto
rules.

From the sweep's rows (one per finished run), the fixed-first runs are grouped into arms (a
[[runs]] entry over its seeds): a fixed switch fraction, or an auto rule. Each arm's headline is
the mean over seeds of the run's metric, averaged over serving depths 1..16 (mean serving NLL, or
with `metric = "task"` the task's score, e.g. chains accuracy), beside the modeled compute it
spent: training FLOPs plus, for `depth-gap`, its probes.

The study's target, per K0 and rule: the auto arm's mean lies within the seed-to-seed spread
(max - min over seeds) of the best fixed fraction's mean, or beyond it on the better side, at no
more compute than that fraction. Where it does not, the verdict says by how much it misses:
quality beyond the spread, and compute above the best fixed fraction's.

switch_study.md is made from switch_study.json alone (`study_document`: every arm's per-seed
values, and the verdicts; `document_markdown` reads the arms back and decides again).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from fixedfirst.studies.sweep.results import by_depth, headline


@dataclass
class Arm:
    group: str
    k0: int
    switch_fraction: float | None
    """The fixed switch fraction, or None for an auto rule."""
    rule: str | None = None
    seeds: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    computes: list[float] = field(default_factory=list)
    training_flops: list[float] = field(default_factory=list)
    probe_flops: list[float] = field(default_factory=list)
    realised_fractions: list[float] = field(default_factory=list)
    """Realised switch fraction of each seed's run."""
    reasons: list[str | None] = field(default_factory=list)
    by_depth: dict[int, float] = field(default_factory=dict)
    """The metric at each serving depth, mean over seeds."""

    @property
    def label(self) -> str:
        return f"switch {self.switch_fraction:g}" if self.rule is None else f"auto ({self.rule})"

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values)

    @property
    def spread(self) -> float:
        return max(self.values) - min(self.values)

    @property
    def compute(self) -> float:
        return sum(self.computes) / len(self.computes)


def arms_of(rows: list[dict[str, Any]], metric: str) -> list[Arm]:
    """The fixed-first rows grouped by [[runs]] entry, in the rows' order."""
    arms: dict[str, Arm] = {}
    for row in rows:
        s = row["schedule_config"]
        if row["kind"] != "fixed-first" or row.get("switch") is None:
            continue
        auto = s["switch"] == "auto"
        arm = arms.setdefault(
            row["group"], Arm(row["group"], s["k0"], None if auto else s["switch"])
        )
        if auto:
            arm.rule = row["switch"]["rule"]
        arm.seeds.append(row["seed"])
        arm.values.append(headline(row, metric))
        arm.computes.append(row["compute"])
        arm.training_flops.append(row["modeled_flops"])
        arm.probe_flops.append(row["probe_flops"])
        arm.realised_fractions.append(row["switch"]["fraction"])
        arm.reasons.append(row["switch"].get("reason"))
    for arm in arms.values():
        group_rows = [by_depth(r, metric) for r in rows if r["group"] == arm.group]
        depths = sorted(set.intersection(*(set(d) for d in group_rows)))
        arm.by_depth = {d: sum(g[d] for g in group_rows) / len(group_rows) for d in depths}
    return list(arms.values())


@dataclass
class Verdict:
    k0: int
    rule: str
    best_fixed: str
    """The best fixed arm's label (best mean)."""
    shortfall: float
    """How much worse the auto arm's mean is than the best fixed arm's (<= 0: as good or better),
    in the metric's units."""
    spread: float
    """The best fixed arm's seed-to-seed spread."""
    compute_ratio: float
    """auto compute / best fixed compute."""
    met: bool
    paired: list[float] = field(default_factory=list)
    """auto - best fixed for each seed both ran (the seeds' shared offset cancels)."""

    @property
    def quality_miss(self) -> float:
        return max(0.0, self.shortfall - self.spread)

    @property
    def compute_miss(self) -> float:
        return max(0.0, self.compute_ratio - 1.0)


def best_fixed(arms: list[Arm], k0: int, lower_is_better: bool) -> Arm | None:
    """The fixed switch fraction with the best mean at this K0."""
    sign = 1.0 if lower_is_better else -1.0
    fixed = [a for a in arms if a.k0 == k0 and a.rule is None]
    return min(fixed, key=lambda a: sign * a.mean) if fixed else None


def paired(arm: Arm, best: Arm) -> list[float]:
    """arm - best for each seed both ran, in seed order: a seed shifts every arm's value alike
    (its initialisation and data order), and the difference cancels that shift."""
    theirs = dict(zip(best.seeds, best.values, strict=True))
    return [v - theirs[s] for s, v in zip(arm.seeds, arm.values, strict=True) if s in theirs]


def verdicts(arms: list[Arm], lower_is_better: bool) -> list[Verdict]:
    sign = 1.0 if lower_is_better else -1.0
    out = []
    for k0 in sorted({a.k0 for a in arms}):
        best = best_fixed(arms, k0, lower_is_better)
        if best is None:
            continue
        for auto in arms:
            if auto.k0 != k0 or auto.rule is None:
                continue
            shortfall = sign * (auto.mean - best.mean)
            ratio = auto.compute / best.compute
            met = shortfall <= best.spread and ratio <= 1.0
            pairs = paired(auto, best)
            out.append(
                Verdict(k0, auto.rule, best.label, shortfall, best.spread, ratio, met, pairs)
            )
    return out


def _fractions(arm: Arm) -> str:
    marks = {"ceiling": " (ceiling)", "rule": ""}
    return ", ".join(
        f"{f:.3f}{marks.get(r or '', '')}"
        for f, r in zip(arm.realised_fractions, arm.reasons, strict=True)
    )


def study_markdown(arms: list[Arm], metric: str, metric_name: str) -> str:
    lower = metric == "nll"
    verdict_list = verdicts(arms, lower)
    best = {(v.k0, v.best_fixed) for v in verdict_list}
    lines = [
        f"| K0 | switch | seeds | modeled compute (FLOPs) | {metric_name}: mean | seed values "
        "| spread | vs best fixed, same seed | switched at (per seed) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for arm in sorted(
        arms, key=lambda a: (a.k0, a.rule is not None, a.switch_fraction or 0, a.rule or "")
    ):
        label = f"**{arm.label}** (best fixed)" if (arm.k0, arm.label) in best else arm.label
        probes = sum(arm.probe_flops) / len(arm.probe_flops)
        compute = f"{arm.compute:.3e}" + (f" (probes {probes:.2e})" if probes else "")
        values = " / ".join(f"{v:.4f}" for v in arm.values)
        top = best_fixed(arms, arm.k0, lower)
        same_seed = " / ".join(f"{d:+.4f}" for d in paired(arm, top)) if top else "–"
        lines.append(
            f"| {arm.k0} | {label} | {len(arm.seeds)} | {compute} | {arm.mean:.4f} | {values} "
            f"| {arm.spread:.4f} | {same_seed} | {_fractions(arm)} |"
        )
    lines += [
        "",
        "Target (issue 18): an auto rule's mean within the best fixed fraction's seed spread of "
        "its mean (or better), at no more modeled compute.",
        "",
    ]
    for v in verdict_list:
        worse = "worse" if v.shortfall > 0 else "better"
        same_seed = ", ".join(f"{d:+.4f}" for d in v.paired)
        what = (
            f"K0 = {v.k0}, {v.rule}: {abs(v.shortfall):.4f} {worse} than the best fixed "
            f"({v.best_fixed}; seed spread {v.spread:.4f}; same seed: {same_seed}) at "
            f"{100 * v.compute_ratio:.1f}% of its compute: "
        )
        if v.met:
            lines.append(f"- {what}**meets the target**.")
            continue
        misses = []
        if v.quality_miss > 0:
            misses.append(f"{v.quality_miss:.4f} beyond the spread")
        if v.compute_miss > 0:
            misses.append(f"{100 * v.compute_miss:.1f}% more compute")
        lines.append(f"- {what}misses by {' and '.join(misses)}.")
    return "\n".join(lines) + "\n"


def study_document(arms: list[Arm], metric: str, metric_name: str) -> dict[str, Any]:
    """switch_study.json: every arm as measured (with its mean, spread and compute) and the
    verdicts."""
    return {
        "format": "fixedfirst-switch-study",
        "version": 1,
        "metric": metric,
        "metric_name": metric_name,
        "lower_is_better": metric == "nll",
        "arms": [
            {
                **asdict(a),
                "by_depth": {str(d): v for d, v in a.by_depth.items()},
                "mean": a.mean,
                "spread": a.spread,
                "compute": a.compute,
            }
            for a in arms
        ],
        "verdicts": [
            {**asdict(v), "quality_miss": v.quality_miss, "compute_miss": v.compute_miss}
            for v in verdicts(arms, metric == "nll")
        ],
    }


def arms_of_document(document: dict[str, Any]) -> list[Arm]:
    """The arms of a switch_study.json, as `arms_of` made them from the rows."""
    names = [f.name for f in fields(Arm)]
    arms = []
    for entry in document["arms"]:
        arm = Arm(**{name: entry[name] for name in names})
        arm.by_depth = {int(d): v for d, v in entry["by_depth"].items()}
        arms.append(arm)
    return arms


def document_markdown(document: dict[str, Any]) -> str:
    """switch_study.md from switch_study.json alone."""
    return study_markdown(arms_of_document(document), document["metric"], document["metric_name"])
