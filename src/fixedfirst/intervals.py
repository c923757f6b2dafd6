"""Student-t confidence intervals for a mean over independent units.

A measurement repeated over independent units (training batches in the update diagnostic,
evaluation sequences in the chains experiment) has for its mean over n units the usual t-interval

    mean ± t_{(1 + level) / 2, n - 1} · sd / sqrt(n),      sd with the n - 1 denominator.

What the interval covers is the sampling of the units, nothing else: in the diagnostic the held-out
set is fixed and shared by every batch, so the interval answers "would another draw of training
batches change the sign?", the paper's question; in the chains experiment it is the sampling of
evaluation sequences for one trained model, and seeds are reported beside it as a spread.

The t quantile is computed here (the regularised incomplete beta function by its continued
fraction, then bisection on the CDF) rather than imported: scipy would be a heavy dependency for
one number, and the values are checked against printed t tables in the tests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

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


def t_quantile(p: float, df: float) -> float:
    """The t value with P(T <= t) = p, by bisection on the CDF, to float precision."""
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
class Interval:
    """A sample mean with its two-sided t confidence interval."""

    mean: float
    low: float
    high: float
    sd: float
    n: int
    level: float

    @property
    def contains_zero(self) -> bool:
        """True when the data cannot tell the sign of the mean at this confidence level."""
        return self.low <= 0.0 <= self.high

    def to_dict(self) -> dict[str, float | int | bool]:
        return {
            "mean": self.mean,
            "low": self.low,
            "high": self.high,
            "sd": self.sd,
            "n": self.n,
            "contains_zero": self.contains_zero,
        }


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
