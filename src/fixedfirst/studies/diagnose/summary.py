"""From the measured benefits of one u to its intervals, and from the intervals to the headline.

The benefit is measured per training batch b (one update pair each) and per held-out sequence j:
a matrix X[b, j] at every serving depth. Both kinds of unit are samples: another draw of training
batches, or of held-out sequences, would give another estimate. Every interval reported is the
two-way bootstrap of `fixedfirst.stats.intervals` over both, for the token-weighted grand mean (each
sequence weighted by its scored tokens, so the estimate is the held-out NLL difference in nats
per token, as before). The depth average and the band averages are taken per (b, j) first, then
bootstrapped: the depths of one (batch, sequence) are not independent units.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fixedfirst.stats.intervals import BootstrapInterval, BootstrapOver, two_way_bootstrap
from fixedfirst.studies.diagnose.update_pair import HeldoutNLL, PairResult

INTERVAL_KIND = "two-way bootstrap over training batches and held-out sequences"
INTERVAL_COVERS = (
    "the sampling of the training batches (each with its own update pair and initial-state draw) "
    "and of the held-out sequences, resampled independently with replacement (percentile "
    "interval); not the run's own training randomness (one run, one seed). Conservative when the "
    "batch x sequence interaction dominates (docs/design.md §6)"
)


@dataclass(frozen=True)
class IntervalSettings:
    """How every interval of the diagnostic is drawn."""

    level: float
    resamples: int
    seed: int
    """The same seed for every interval: each resamples the same batches and sequences."""

    def describe(self) -> dict[str, Any]:
        return {
            "kind": INTERVAL_KIND,
            "covers": INTERVAL_COVERS,
            "level": self.level,
            "resamples": self.resamples,
            "seed": self.seed,
        }


def depth_bands(serving_depths: list[int], shallow: int, deep: int) -> dict[str, list[int]]:
    """The serving depths split where the two update depths split them: at or below the shallow
    update's depth, between the two, and beyond the deep one (each band only if measured).

    A depth average can hide opposite signs (the shallow update helps at depth 1 while the deep
    one helps at 5..16, and the two cancel), so the headline is stated per band as well."""
    bands = {
        f"1..{shallow}": [k for k in serving_depths if k <= shallow],
        f"{shallow + 1}..{deep}": [k for k in serving_depths if shallow < k <= deep],
        f">{deep}": [k for k in serving_depths if k > deep],
    }
    return {name: depths for name, depths in bands.items() if depths}


class Measurements:
    """The numbers of one u: the benefit per batch, held-out sequence and serving depth; per
    batch the token-weighted NLLs after each update and the raw update RMSs."""

    def __init__(self, batches: int, sequences: int, serving_depths: list[int]) -> None:
        self.serving_depths = list(serving_depths)
        self.benefit = np.empty((batches, sequences, len(serving_depths)))
        self.nll_shallow = np.empty((batches, len(serving_depths)))
        self.nll_deep = np.empty((batches, len(serving_depths)))
        self.rms = np.empty((batches, 3))
        self.tokens = np.zeros(sequences)

    def add(self, i: int, result: PairResult) -> None:
        self.benefit[i] = result.benefit_per_sequence
        self.tokens = result.nll_shallow.tokens
        self.nll_shallow[i] = list(result.nll_shallow.mean().values())
        self.nll_deep[i] = list(result.nll_deep.mean().values())
        self.rms[i] = (result.rms_shallow, result.rms_deep, result.rms_reference)

    def per_batch_benefit(self, measured: int | None = None) -> np.ndarray:
        """(batches, depths): the token-weighted benefit of each of the first `measured` batches."""
        return self.tokens @ self.benefit[:measured] / self.tokens.sum()

    def summary(
        self, baseline: HeldoutNLL, bands: dict[str, list[int]], settings: IntervalSettings
    ) -> dict[str, Any]:
        names = [str(k) for k in self.serving_depths]
        baseline_mean = baseline.mean()
        return {
            **benefit_intervals(self.benefit, self.tokens, self.serving_depths, bands, settings),
            "baseline_nll": {str(k): baseline_mean[k] for k in self.serving_depths},
            "nll_after_shallow": dict(zip(names, self.nll_shallow.mean(0).tolist(), strict=True)),
            "nll_after_deep": dict(zip(names, self.nll_deep.mean(0).tolist(), strict=True)),
            "update_rms": dict(
                zip(("shallow", "deep", "reference"), self.rms.mean(0).tolist(), strict=True)
            ),
            "per_batch_benefit": self.per_batch_benefit().tolist(),
        }


def benefit_intervals(
    benefit: np.ndarray,
    tokens: np.ndarray,
    serving_depths: list[int],
    bands: dict[str, list[int]],
    settings: IntervalSettings,
) -> dict[str, Any]:
    """Every interval of one u from its benefits, (batches, held-out sequences, serving depths),
    with each sequence weighted by its scored `tokens`: per serving depth, the depth average (with
    the standard errors of resampling one kind of unit only) and each band's average. The report
    computes them again from report.json's benefits with this function."""

    def interval(x: np.ndarray, over: BootstrapOver = "both") -> BootstrapInterval:
        return two_way_bootstrap(x, settings.level, settings.resamples, settings.seed, tokens, over)

    def with_sources(x: np.ndarray) -> dict[str, Any]:
        """The interval, and the standard errors with only the batches or only the held-out
        sequences resampled: how much of the uncertainty each kind of unit brings."""
        return {
            **interval(x).to_dict(),
            "se_batches_only": interval(x, "rows").se,
            "se_heldout_only": interval(x, "columns").se,
        }

    columns = {k: j for j, k in enumerate(serving_depths)}
    average = with_sources(benefit.mean(axis=2))
    return {
        "benefit": {
            str(k): interval(benefit[:, :, j]).to_dict() for j, k in enumerate(serving_depths)
        },
        "depth_average": average,
        "bands": {
            name: with_sources(benefit[:, :, [columns[k] for k in depths]].mean(axis=2))
            for name, depths in bands.items()
        },
        "contains_zero": average["contains_zero"],
    }


def _interval_of(row: dict[str, Any], band: str | None) -> dict[str, Any]:
    return row["depth_average"] if band is None else row["bands"][band]


def first_u_containing_zero(rows: list[dict[str, Any]], band: str | None = None) -> int | None:
    """The first measured u whose interval (depth average, or one band's) contains zero."""
    for row in rows:
        if _interval_of(row, band)["contains_zero"]:
            return row["u"]
    return None


def contained_from(rows: list[dict[str, Any]], band: str | None = None) -> int | None:
    """The smallest u from which every larger measured u also contains zero: the headline,
    since a single interval that contains zero between two that do not says little."""
    start = None
    for row in reversed(rows):
        if not _interval_of(row, band)["contains_zero"]:
            break
        start = row["u"]
    return start
