"""Arms scored on the chains task by difficulty band and serving depth: intervals over seeds, the
preset's primary comparisons, and every arm against a reference arm with Holm's correction.

The looped mixture-of-experts study and the finishing study (studies/moe, studies/finishing)
both score each run as `tasks/chains` accuracy per (depth, difficulty) and per band
(`studies/chains/scoring.band_table`); they read them by the rules of the chains study
(docs/design.md §5, "chains: the rules"): the seed is the unit, an accuracy's interval is a 95%
t-interval over seeds cut at 0 and 1, a comparison is the same-seed difference, the primary
comparisons named in the preset before the runs are decided each by its own interval, and every
other difference is exploratory, corrected over all of them by Holm's method
(`studies/comparisons.py`).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np

from fixedfirst.config import RunConfig
from fixedfirst.stats.evidence import over_seeds, paired, sign
from fixedfirst.studies.chains.analysis import ACCURACY, PrimaryComparison, band_roles
from fixedfirst.studies.comparisons import correct_family, primary_verdict


def _accuracy(run: dict[str, Any], role: str, depth: int) -> float:
    bands = run["scores"]["bands"]
    return bands[band_roles(bands)[role]]["by_depth"][str(depth)]


def same_seed_difference(a: dict[int, float], b: dict[int, float]) -> dict[str, Any] | None:
    """a - b paired by seed with its 95% interval and sign; None with fewer than two seeds."""
    if len(set(a) & set(b)) < 2:
        return None
    interval = paired(a, b)
    return {**interval.to_dict(), "sign": sign(interval)}


def analyse_arms(
    runs: dict[str, dict[str, Any]],
    depths: list[int],
    reference: str,
    compare_depths: list[int],
    primary: list[PrimaryComparison],
) -> dict[str, Any]:
    """runs: name -> {"arm", "seed", "scores"}; every arm's band accuracy at every depth, each
    arm minus `reference` at every band and each of `compare_depths` (the exploratory family,
    Holm-corrected), and the primary comparisons (arms are the comparisons' schedules)."""
    arms = list(dict.fromkeys(r["arm"] for r in runs.values()))
    by_arm = {a: {r["seed"]: r for r in runs.values() if r["arm"] == a} for a in arms}
    first = next(iter(runs.values()))["scores"]["bands"]
    roles = band_roles(first)

    def values(arm: str, role: str, depth: int) -> dict[int, float]:
        return {s: _accuracy(r, role, depth) for s, r in by_arm[arm].items()}

    versus: dict[str, dict[str, Any]] = {}
    family: list[dict[str, Any]] = []
    primary_cells = {(p.a, p.a_depth, p.b, p.b_depth, p.band) for p in primary}
    for arm in arms:
        if arm == reference or reference not in by_arm:
            continue
        versus[arm] = {}
        for role in roles:
            for depth in compare_depths:
                d = same_seed_difference(values(arm, role, depth), values(reference, role, depth))
                versus[arm][f"{role}@{depth}"] = d
                if d is not None and (arm, depth, reference, depth, role) not in primary_cells:
                    family.append(d)
    correct_family(family)
    primaries = []
    for p in primary:
        d = same_seed_difference(values(p.a, p.band, p.a_depth), values(p.b, p.band, p.b_depth))
        verdict = None if d is None else primary_verdict(d["low"], d["high"], p.bar)
        primaries.append({**asdict(p), "difference": d, "verdict": verdict})
    return {
        "arms": arms,
        "seeds": sorted({r["seed"] for r in runs.values()}),
        "reference": reference,
        "bands": {
            role: {"label": label, "low": first[label]["low"], "high": first[label]["high"]}
            for role, label in roles.items()
        },
        "band_accuracy": {
            arm: {
                role: {
                    str(d): over_seeds(values(arm, role, d), bounds=ACCURACY).to_dict()
                    for d in depths
                }
                for role in roles
            }
            for arm in arms
        },
        "accuracy_by_difficulty": {
            arm: {
                str(d): np.mean(
                    [r["scores"]["accuracy"][str(d)] for r in by_arm[arm].values()], axis=0
                ).tolist()
                for d in depths
            }
            for arm in arms
        },
        "versus_reference": versus,
        "primary": primaries,
        "exploratory": {
            "size": len(family),
            "uncorrected": sum(d["sign"] != "cannot tell" for d in family),
            "corrected": sum(d["holm"] != "cannot tell" for d in family),
        },
    }


def arms_results(
    format: str,
    preset: str,
    reference: str,
    experiment: Any,
    first: RunConfig,
    runs: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """The results document of a study of arms on chains: its settings (`experiment` is the
    preset's dataclass, with `flops`, `depths`, `compare_depths` and `primary`; `first` its
    first run's configuration), every run, and their `analyse_arms`."""
    from fixedfirst.data.registry import kind_options

    options = kind_options(first)
    e = experiment
    return {
        "format": format,
        "version": 1,
        "preset": preset,
        "reference": reference,
        "flop_budget": e.flops,
        "model": asdict(first.model),
        "task": asdict(options),
        "experiment": asdict(e),
        "chance": 1 / options.values,
        "runs": runs,
        "analysis": analyse_arms(runs, e.depths, reference, e.compare_depths, e.primary),
    }


REPORT_SETTINGS = ("preset", "reference", "flop_budget", "chance", "model", "task", "experiment")
"""The results document's keys a report reads unchanged, in the order the report's JSON has them."""


def arms_report_numbers(
    results: dict[str, Any], format: str, run_fields: tuple[str, ...], run_values: tuple[str, ...]
) -> dict[str, Any]:
    """What such a study's report.md is computed from: the settings, and of every run its
    `run_fields` (cost and identity) and `run_values` (what was measured)."""
    return {
        "format": format,
        "version": 1,
        **{key: results[key] for key in REPORT_SETTINGS},
        "wall_clock_s": results.get("wall_clock_s"),
        "workers": results.get("workers"),
        "runs": {
            name: {key: r[key] for key in run_fields + run_values}
            for name, r in results["runs"].items()
        },
    }
