"""Confidence intervals for a mean over sampled units.

One kind of unit (batches, sequences, seeds): the t-interval. Two kinds, crossed (every batch's
update scored on every held-out sequence in the update diagnostic): `two_way_bootstrap`, which
resamples rows and columns independently and so covers both samplings (docs/design.md §6). The t
quantile is computed here rather than imported from scipy, a heavy dependency for one number
(docs/design.md §4).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b) (modified Lentz; Numerical Recipes §6.4)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def regularized_incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(log_front)
    # The fraction converges fast for x < (a + 1) / (a + b + 2); use the symmetry otherwise.
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_continued_fraction(a, b, x) / a
    return 1.0 - front * _beta_continued_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom."""
    tail = 0.5 * regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


@functools.lru_cache(maxsize=256)
def t_quantile(p: float, df: float) -> float:
    """The t value with P(T <= t) = p, by bisection on the CDF, to float precision. Memoised: a
    bisection costs about a millisecond, and a report asks for the same few (p, df) thousands of
    times (one per interval)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-15 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class Estimate:
    """An estimate with the two ends of its confidence interval."""

    mean: float
    low: float
    high: float

    @property
    def contains_zero(self) -> bool:
        """True when the data cannot tell the sign of the mean at this confidence level."""
        return self.low <= 0.0 <= self.high

    def to_dict(self) -> dict[str, float | int | bool]:
        return {
            "mean": self.mean,
            "low": self.low,
            "high": self.high,
            "contains_zero": self.contains_zero,
        }


@dataclass(frozen=True)
class Interval(Estimate):
    """A sample mean with its two-sided t confidence interval."""

    sd: float
    n: int
    level: float

    def to_dict(self) -> dict[str, float | int | bool]:
        return {**super().to_dict(), "sd": self.sd, "n": self.n}


def t_interval(samples: Sequence[float] | np.ndarray, level: float = 0.95) -> Interval:
    """The mean of `samples` and its two-sided `level` t-interval (needs at least 2 samples)."""
    x = np.asarray(samples, dtype=np.float64)
    n = x.size
    if n < 2:
        raise ValueError(f"a t-interval needs at least 2 samples, got {n}")
    mean = float(x.mean())
    sd = float(x.std(ddof=1))
    half = t_quantile(0.5 + level / 2.0, n - 1) * sd / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, sd, n, level)


def ratio_interval(
    sums: Sequence[float] | np.ndarray, counts: Sequence[float] | np.ndarray, level: float = 0.95
) -> Interval:
    """sum(sums) / sum(counts) over units (held-out blocks: each block's summed NLL and its
    scored tokens) and its two-sided `level` t-interval by the ratio estimator's linearisation:
    the residuals (sum_i - R count_i) / mean count over the units that count anything. With
    equal counts it is `t_interval` of the per-unit means; a difference of two models scored on
    the same units is the ratio of the differences of their sums (paired)."""
    s = np.asarray(sums, dtype=np.float64)
    c = np.asarray(counts, dtype=np.float64)
    if s.shape != c.shape:
        raise ValueError(f"sums and counts differ in shape: {s.shape} and {c.shape}")
    keep = c > 0
    s, c = s[keep], c[keep]
    n = s.size
    if n < 2:
        raise ValueError(f"an interval needs at least 2 units that count something, got {n}")
    ratio = float(s.sum() / c.sum())
    residuals = (s - ratio * c) / c.mean()
    sd = float(residuals.std(ddof=1))
    half = t_quantile(0.5 + level / 2.0, n - 1) * sd / math.sqrt(n)
    return Interval(ratio, ratio - half, ratio + half, sd, n, level)


BootstrapOver = Literal["both", "rows", "columns"]
BOOTSTRAP_OVER: tuple[str, ...] = ("both", "rows", "columns")


@dataclass(frozen=True)
class BootstrapInterval(Estimate):
    """A rows x columns matrix's (weighted) grand mean and its percentile bootstrap interval."""

    se: float
    """Standard deviation of the bootstrap estimates: the estimate's standard error."""
    rows: int
    columns: int
    level: float
    resamples: int
    over: str
    """What was resampled: both kinds of unit, or only the rows, or only the columns."""

    def to_dict(self) -> dict[str, float | int | bool]:
        return {**super().to_dict(), "se": self.se}


def _resample_counts(rng: np.random.Generator, units: int, resamples: int) -> np.ndarray:
    """(resamples, units): how often each unit is drawn in `units` draws with replacement."""
    drawn = rng.integers(0, units, size=(resamples, units)) + units * np.arange(resamples)[:, None]
    counts = np.bincount(drawn.ravel(), minlength=resamples * units)
    return counts.reshape(resamples, units).astype(np.float64)


def two_way_bootstrap(
    x: Sequence[Sequence[float]] | np.ndarray,
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    column_weights: Sequence[float] | np.ndarray | None = None,
    over: BootstrapOver = "both",
) -> BootstrapInterval:
    """The grand mean of x[b, j] and its percentile interval, rows and columns resampled
    independently with replacement (`over` = "rows" or "columns" resamples one kind only).

    column_weights: the estimate is sum_bj w_j x_bj / (B sum_j w_j), e.g. x a per-sequence mean
    and w its token count, so that the estimate is the per-token mean; a resample divides by its
    own drawn weight. Columns of weight 0 carry nothing and are left out. The same seed, shape
    and `over` draw the same resamples, so intervals of several matrices measured on the same
    units resample them alike.
    """
    if over not in BOOTSTRAP_OVER:
        raise ValueError(f"over must be one of {BOOTSTRAP_OVER}, got {over!r}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if resamples < 2:
        raise ValueError(f"resamples must be >= 2, got {resamples}")
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"x must be a (rows, columns) matrix, got shape {x.shape}")
    weights = np.ones(x.shape[1]) if column_weights is None else np.asarray(column_weights, float)
    if weights.shape != (x.shape[1],) or not np.all(np.isfinite(weights)) or weights.min() < 0:
        raise ValueError(f"column_weights must be {x.shape[1]} finite numbers >= 0")
    kept = weights > 0
    x, weights = x[:, kept], weights[kept]
    rows, columns = x.shape
    for name, units, resampled in (
        ("rows", rows, over != "columns"),
        ("columns", columns, over != "rows"),
    ):
        if units < (2 if resampled else 1):
            raise ValueError(f"resampling {name} needs at least 2 of them, got {units}")
    if not np.all(np.isfinite(x)):
        raise ValueError("x must be finite")
    weighted = x * weights
    estimate = float(weighted.sum() / (rows * weights.sum()))
    rng = np.random.default_rng(seed)
    row_counts = _resample_counts(rng, rows, resamples)
    column_counts = _resample_counts(rng, columns, resamples)
    if over == "columns":
        row_counts = np.ones_like(row_counts)
    if over == "rows":
        column_counts = np.ones_like(column_counts)
    numerators = ((row_counts @ weighted) * column_counts).sum(axis=1)
    estimates = numerators / (rows * (column_counts @ weights))
    low, high = np.quantile(estimates, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    se = float(estimates.std(ddof=1))
    return BootstrapInterval(
        estimate, float(low), float(high), se, rows, columns, level, resamples, over
    )


@dataclass(frozen=True)
class CrossedInterval(Estimate):
    """A seeds x held-out blocks matrix's grand mean with its t-interval (`crossed_interval`)."""

    se: float
    df: float
    """Satterthwaite's degrees of freedom of the standard error."""
    seeds: int
    blocks: int
    level: float
    held_out_share: float
    """The share of the variance of the mean that the held-out blocks contribute."""

    def to_dict(self) -> dict[str, float | int | bool]:
        return {**super().to_dict(), "se": self.se, "df": self.df, "n": self.seeds}


def crossed_interval(
    y: Sequence[Sequence[float]] | np.ndarray, level: float = 0.95
) -> CrossedInterval:
    """The grand mean of y[s, b] (S seeds x B equal-sized blocks of one shared held-out set) and
    its t-interval covering both the seeds and the held-out sample.

    Random-effects two-way analysis of variance with one value per cell, y = mu + a_s + b_b + e:
    var(mean) = var(a)/S + var(b)/B + var(e)/(SB), estimated by (MS_seeds + MS_blocks -
    MS_residual) / (SB) with a block component below zero taken as zero (then MS_seeds / (SB),
    the usual interval over seed means), and Satterthwaite's degrees of freedom for the t
    quantile. With one block it is the t-interval over seeds."""
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 2:
        raise ValueError(f"y must be a (seeds, blocks) matrix, got shape {y.shape}")
    seeds, blocks = y.shape
    if seeds < 2:
        raise ValueError(f"an interval over seeds needs at least 2 of them, got {seeds}")
    if not np.all(np.isfinite(y)):
        raise ValueError("y must be finite")
    mean = float(y.mean())
    seed_means, block_means = y.mean(axis=1), y.mean(axis=0)
    ms_seeds = blocks * float(((seed_means - mean) ** 2).sum()) / (seeds - 1)
    terms = [(ms_seeds, seeds - 1)]  # (mean square, its degrees of freedom), each over S*B
    if blocks > 1:
        ms_blocks = seeds * float(((block_means - mean) ** 2).sum()) / (blocks - 1)
        residual = y - seed_means[:, None] - block_means[None, :] + mean
        ms_residual = float((residual**2).sum()) / ((seeds - 1) * (blocks - 1))
        if ms_blocks > ms_residual:
            terms += [(ms_blocks, blocks - 1), (-ms_residual, (seeds - 1) * (blocks - 1))]
    variance = sum(ms for ms, _ in terms) / (seeds * blocks)
    se = math.sqrt(max(variance, 0.0))
    if se == 0.0:
        return CrossedInterval(mean, mean, mean, 0.0, float(seeds - 1), seeds, blocks, level, 0.0)
    df = (variance * seeds * blocks) ** 2 / sum(ms**2 / d for ms, d in terms)
    half = t_quantile(0.5 + level / 2.0, df) * se
    held_out = 0.0 if len(terms) == 1 else (terms[1][0] + terms[2][0]) / (seeds * blocks)
    return CrossedInterval(
        mean, mean - half, mean + half, se, df, seeds, blocks, level, held_out / variance
    )
