"""Arms scored on the chains task by difficulty band and serving depth: intervals over seeds, the
preset's primary comparisons, and every arm against a reference arm with Holm's correction.

The looped mixture-of-experts study and the finishing study (studies/moe, studies/finishing)
both score each run as `tasks/chains` accuracy per (depth, difficulty) and per band
(`studies/chains/scoring.band_table`); they read them by the rules of the chains study
(docs/design.md §5, "chains: the rules"): the seed is the unit, an accuracy's interval is a 95%
t-interval over seeds cut at 0 and 1, a comparison is the same-seed difference, the primary
comparisons named in the preset before the runs are decided each by its own interval, and every
other difference is exploratory, corrected over all of them by Holm's method (`claims.py`).
The chains study names its primaries in the same table (`BAND_CLAIMS`).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, ClassVar

import numpy as np

from fixedfirst.config import RunConfig
from fixedfirst.stats.evidence import over_seeds
from fixedfirst.studies.kit.claims import Claim, ClaimTable, compare_arms
from fixedfirst.studies.kit.settings import StudySettings
from fixedfirst.tasks.chains.bands import ROLES, band_roles

ACCURACY = (0.0, 1.0)
"""An accuracy's range: its interval over seeds is cut there (`evidence.over_seeds`)."""
BAND_CLAIMS = ClaimTable(
    "primary",
    "A preset's [[experiment.primary]] table of a study scored by band and depth (chains, the "
    "looped mixture-of-experts, finishing): seed by seed, arm a's accuracy at a_depth minus arm "
    "b's at b_depth on one band of the standard set, at matched FLOPs.",
    {
        "name": "name",
        "band": "of",
        "a": "a",
        "a_depth": "a_depth",
        "b": "b",
        "b_depth": "b_depth",
        "bar": "bar",
    },
    required=("name", "band", "a", "a_depth", "b", "b_depth"),
    choices={"band": ROLES},
    meaning={
        "band": "The band of the standard set, by role: easy or hard (the halves of the "
        "training range), near (up to twice it), far (beyond). One of `easy`, `hard`, `near`, "
        "`far`.",
        "bar": "Unset: claimed above zero, decided by the interval's side (higher, lower, cannot "
        "tell). A number: claimed at least that (accuracy as a fraction, 0.40 for 40 points): "
        "meets the bar when the interval's lower end is at or above it, below the bar when its "
        "upper end is under it, otherwise cannot tell.",
    },
)


class DepthArmsSettings(StudySettings):
    """The [experiment] keys of a study of arms scored by band and depth besides those every
    study has (its dataclass declares them with its defaults): verdicts over at least two seeds,
    depths up to 64."""

    LEAST_SEEDS: ClassVar[int] = 2
    DEEPEST: ClassVar[int] = 64
    SEQUENCES: ClassVar[tuple[str, ...]] = ("sequences",)

    compare_depths: list[int]
    """Depths at which every arm is compared with the reference (the exploratory family)."""
    sequences: int
    """Evaluation sequences (one label of every difficulty 0..eval_ops each)."""


def _accuracy(run: dict[str, Any], role: str, depth: int) -> float:
    bands = run["scores"]["bands"]
    return bands[band_roles(bands)[role]]["by_depth"][str(depth)]


def analyse_arms(
    runs: dict[str, dict[str, Any]],
    depths: list[int],
    reference: str,
    compare_depths: list[int],
    primary: list[Claim],
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

    cells = [(role, depth) for role in roles for depth in compare_depths]
    compared = compare_arms(arms, reference, cells, values, primary, BAND_CLAIMS)
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
        "versus_reference": compared.versus,
        "primary": compared.primary,
        "exploratory": compared.exploratory,
    }


def arms_results(
    format: str,
    preset: str,
    reference: str,
    experiment: DepthArmsSettings,
    first: RunConfig,
    runs: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """The results document of a study of arms on chains: its settings (`first` its first run's
    configuration), every run, and their `analyse_arms`."""
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
        "experiment": e.to_dict(),
        "chance": 1 / options.values,
        "runs": runs,
        "analysis": analyse_arms(runs, e.depths, reference, e.compare_depths, e.primary),
    }
