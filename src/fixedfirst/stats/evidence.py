"""What a set of seeds supports: a score over seeds, the paired difference of two arms, a verdict.

A single run's score moves with everything a seed fixes and with the machine's rounding, so a
claim about arms is a claim over seeds: `over_seeds` (an arm's t-interval), `paired` and
`paired_relative` (same-seed differences, sharper than comparing two means), and `sign` and
`verdict`, the words a reader may use; an interval containing zero is "cannot tell", never a
ranking. Where every seed scores one shared held-out set, `over_seeds_and_rows` and
`paired_over_rows` also cover the held-out sample; `holm` corrects a family of exploratory
verdicts. What each interval covers is docs/design.md §4.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from fixedfirst.stats.intervals import (
    CrossedInterval,
    Estimate,
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


def over_seeds(
    values: Mapping[int, float], level: float = LEVEL, bounds: tuple[float, float] | None = None
) -> OverSeeds:
    """The mean over seeds and its t-interval (None for a single seed: no spread to measure).

    bounds: the range a bounded quantity cannot leave (an accuracy in [0, 1], recall in [0, the
    ceiling]); the interval is cut at them. The mean being estimated lies within the bounds, so
    the cut interval contains it whenever the t-interval does: the coverage is unchanged, and no
    interval claims a recall below nothing or above the ceiling."""
    if not values:
        raise ValueError("no seeds to summarise")
    ordered = {int(s): float(v) for s, v in sorted(values.items())}
    x = list(ordered.values())
    if bounds is not None:
        slack = 1e-9 * max(1.0, *map(abs, bounds))  # a share summed in another order
        if not bounds[0] - slack <= min(x) <= max(x) <= bounds[1] + slack:
            raise ValueError(f"values {x} outside their bounds {bounds}")
    if len(x) < 2:
        return OverSeeds(ordered, x[0], None, None)
    interval = t_interval(x, level)
    low, high = interval.low, interval.high
    if bounds is not None:
        low, high = max(low, bounds[0]), min(high, bounds[1])
    return OverSeeds(ordered, interval.mean, low, high)


def common_seeds(a: Mapping[int, object], b: Mapping[int, object]) -> list[int]:
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


def _two_or_more(a: Mapping[int, object], b: Mapping[int, object]) -> list[int]:
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


def verdict(interval: Estimate, claim: Claim, bound: float = 0.0) -> Verdict:
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
    the seeds and the held-out sample (`paired_matrix`)."""
    return crossed_interval(paired_matrix(a, b, relative), level)


def paired_matrix(
    a: Mapping[int, Sequence[float]], b: Mapping[int, Sequence[float]], relative: bool
) -> np.ndarray:
    """(seeds both have, blocks): per seed and block, the paired quantity whose grand mean is
    the mean over seeds of each seed's whole-set a - b or a / b - 1.

    A relative one is linearised per block (delta method): y[s, j] = G_s + (a[s, j] - (1 + G_s)
    b[s, j]) / mean_j b[s, j], whose block mean is G_s = mean_j a / mean_j b - 1 exactly, and
    whose spread over blocks is what the held-out sample adds. Seed-only `paired` and
    `paired_relative` estimate the same mean."""
    seeds = _two_or_more(a, b)
    x, y = blocks_matrix(a, seeds), blocks_matrix(b, seeds)
    if x.shape != y.shape:
        raise ValueError(f"a and b are scored on different blocks: {x.shape} and {y.shape}")
    if not relative:
        return x - y
    b_mean = y.mean(axis=1, keepdims=True)
    if np.any(b_mean == 0):
        raise ValueError("a relative difference needs b's mean != 0 for every seed")
    gap = x.mean(axis=1, keepdims=True) / b_mean - 1.0
    return gap + (x - (1.0 + gap) * y) / b_mean


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
