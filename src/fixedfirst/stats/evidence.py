"""What a set of seeds supports: a score over seeds, the paired difference of two arms, a verdict.

An experiment here compares arms (schedules, settings) that were each trained once per seed. A
single run's score moves with everything a seed fixes (initialisation, data order, the recurrent
state's draws) and with the machine's rounding, so a claim about arms is a claim over seeds:

- `over_seeds(values)`: an arm's mean with its two-sided t-interval over its seeds;
- `paired(a, b)`: the mean of a[s] - b[s] over the seeds both arms ran, with its t-interval. Arms
  that share a seed share its data order and evaluation draw, so pairing removes what the seed
  does to both alike and is sharper than comparing two means; `paired_relative(a, b)` the same
  for a[s] / b[s] - 1, the paper's "within 0.5% of uniform";
- `sign(interval)` and `verdict(interval, claim, bound)`: the words a reader may use. A difference
  whose interval contains zero is "cannot tell", never a ranking.

An interval over seeds covers what the seeds vary. Where an experiment also draws its held-out set
per seed (chains, the language-model sweep's validation offset), the interval covers the held-out
sampling too; where every seed scores one shared held-out set, `over_seeds_and_rows` and
`paired_over_rows` take each seed's values on blocks of that set, so that the interval covers the
held-out sample as well as the seeds. docs/design.md §4 says which experiment does what. `holm`
corrects the verdicts of a family of exploratory comparisons.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from fixedfirst.stats.intervals import (
    CrossedInterval,
    Interval,
    crossed_interval,
    t_cdf,
    t_interval,
)

LEVEL = 0.95
"""Confidence level of every interval over seeds."""

Claim = Literal["above", "below"]
Verdict = Literal["reproduced", "not reproduced", "cannot tell"]


@dataclass(frozen=True)
class OverSeeds:
    """One arm's score: every seed's value, their mean, range and (n >= 2) t-interval."""

    values: dict[int, float]
    mean: float
    low: float | None
    high: float | None

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def min(self) -> float:
        return min(self.values.values())

    @property
    def max(self) -> float:
        return max(self.values.values())

    def to_dict(self) -> dict:
        return {
            "values": {str(s): v for s, v in self.values.items()},
            "mean": self.mean,
            "low": self.low,
            "high": self.high,
            "min": self.min,
            "max": self.max,
            "n": self.n,
        }


def over_seeds(values: Mapping[int, float], level: float = LEVEL) -> OverSeeds:
    """The mean over seeds and its t-interval (None for a single seed: no spread to measure)."""
    if not values:
        raise ValueError("no seeds to summarise")
    ordered = {int(s): float(v) for s, v in sorted(values.items())}
    x = list(ordered.values())
    if len(x) < 2:
        return OverSeeds(ordered, x[0], None, None)
    interval = t_interval(x, level)
    return OverSeeds(ordered, interval.mean, interval.low, interval.high)


def common_seeds(a: Mapping[int, float], b: Mapping[int, float]) -> list[int]:
    """The seeds both arms ran, in order."""
    return sorted(set(a) & set(b))


def paired(a: Mapping[int, float], b: Mapping[int, float], level: float = LEVEL) -> Interval:
    """a[s] - b[s] over the seeds both have: its mean and t-interval (needs two common seeds)."""
    return t_interval([a[s] - b[s] for s in _two_or_more(a, b)], level)


def paired_relative(
    a: Mapping[int, float], b: Mapping[int, float], level: float = LEVEL
) -> Interval:
    """a[s] / b[s] - 1 over the seeds both have: its mean and t-interval (two common seeds).
    Each seed's ratio is taken first, so a seed that moves both arms alike cancels."""
    seeds = _two_or_more(a, b)
    if any(b[s] == 0 for s in seeds):
        raise ValueError("a relative difference needs b[s] != 0 for every seed")
    return t_interval([a[s] / b[s] - 1.0 for s in seeds], level)


def _two_or_more(a: Mapping[int, float], b: Mapping[int, float]) -> list[int]:
    common = common_seeds(a, b)
    if len(common) < 2:
        raise ValueError(
            f"a paired difference needs at least 2 seeds both arms ran, got {len(common)}"
        )
    return common


def sign(interval: Interval) -> Literal["positive", "negative", "cannot tell"]:
    """The sign of a difference, if its interval excludes zero."""
    if interval.low > 0:
        return "positive"
    if interval.high < 0:
        return "negative"
    return "cannot tell"


def verdict(interval: Interval, claim: Claim, bound: float = 0.0) -> Verdict:
    """Does the interval support `quantity > bound` (claim "above") or `quantity < bound`
    ("below")? Reproduced when the whole interval is on the claimed side, not reproduced when
    the whole interval is on the other side, otherwise the seeds cannot tell."""
    if claim not in ("above", "below"):
        raise ValueError(f"claim must be 'above' or 'below', got {claim!r}")
    if interval.low > bound:
        return "reproduced" if claim == "above" else "not reproduced"
    if interval.high < bound:
        return "reproduced" if claim == "below" else "not reproduced"
    return "cannot tell"


def blocks_matrix(blocks: Mapping[int, Sequence[float]], seeds: list[int]) -> np.ndarray:
    """(seeds, blocks) of each seed's values on the blocks of one shared held-out set."""
    widths = {len(blocks[s]) for s in seeds}
    if len(widths) != 1:
        raise ValueError(f"every seed must be scored on the same blocks, got widths {widths}")
    return np.array([blocks[s] for s in seeds], dtype=np.float64)


def over_seeds_and_rows(
    blocks: Mapping[int, Sequence[float]], level: float = LEVEL
) -> CrossedInterval:
    """An arm's mean over seeds and a shared held-out set's blocks, with an interval covering
    both (`intervals.crossed_interval`); blocks[s] is seed s's value on each block."""
    return crossed_interval(blocks_matrix(blocks, sorted(blocks)), level)


def paired_over_rows(
    a: Mapping[int, Sequence[float]],
    b: Mapping[int, Sequence[float]],
    relative: bool,
    level: float = LEVEL,
) -> CrossedInterval:
    """a - b (or a / b - 1) paired by seed on a shared held-out set, with an interval covering
    the seeds and the held-out sample.

    The estimate is the mean over seeds of each seed's whole-set quantity, exactly what the
    seed-only `paired`/`paired_relative` estimate. A relative one is linearised per block
    (delta method): y[s, j] = G_s + (a[s, j] - (1 + G_s) b[s, j]) / mean_j b[s, j], whose block
    mean is G_s = mean_j a / mean_j b - 1, and whose spread over blocks is what the held-out
    sample adds."""
    seeds = _two_or_more(a, b)
    x, y = blocks_matrix(a, seeds), blocks_matrix(b, seeds)
    if x.shape != y.shape:
        raise ValueError(f"a and b are scored on different blocks: {x.shape} and {y.shape}")
    if not relative:
        return crossed_interval(x - y, level)
    b_mean = y.mean(axis=1, keepdims=True)
    if np.any(b_mean == 0):
        raise ValueError("a relative difference needs b's mean != 0 for every seed")
    gap = x.mean(axis=1, keepdims=True) / b_mean - 1.0
    return crossed_interval(gap + (x - (1.0 + gap) * y) / b_mean, level)


def two_sided_p(estimate: float, se: float, df: float, bound: float = 0.0) -> float:
    """The two-sided p-value of `estimate` against `bound` for a t statistic with `df`."""
    if se == 0.0:
        return 0.0 if estimate != bound else 1.0
    t = abs(estimate - bound) / se
    return 2.0 * (1.0 - t_cdf(t, df))


def holm(p_values: Sequence[float], alpha: float = 1.0 - LEVEL) -> list[bool]:
    """Holm's step-down rejections at family-wise error `alpha`: sorted ascending, the k-th
    smallest p (from 0) is rejected while p <= alpha / (m - k)."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rejected = [False] * len(p_values)
    for k, i in enumerate(order):
        if p_values[i] > alpha / (len(p_values) - k):
            break
        rejected[i] = True
    return rejected
