"""A noise-aware trend: the least-squares slope of a short series and its standard error.

Both switch rules ask one question of a noisy series (training losses, or probes of the gain from
depth): has it stopped falling? One logged training loss moves by more from batch to batch than
the loss falls over many steps, so comparing two values says nothing; a straight line fitted to
the trailing window averages the noise out, and its standard error says how far to trust the
slope. The standard error assumes independent residuals around the line, which the loss of
consecutive batches nearly satisfies (each step sees a fresh batch).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Trend:
    slope: float
    """Change of y per unit of x."""
    stderr: float
    """Standard error of the slope (residual variance over n - 2 degrees of freedom)."""
    points: int


def fit_trend(xs: Sequence[float], ys: Sequence[float]) -> Trend | None:
    """The ordinary least-squares line through (xs, ys); None with fewer than 3 points or when
    every x is the same (no slope to speak of)."""
    n = len(xs)
    if n != len(ys):
        raise ValueError(f"{n} x values for {len(ys)} y values")
    if n < 3:
        return None
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    if sxx == 0.0:
        return None
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sxx
    intercept = mean_y - slope * mean_x
    residual = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True))
    return Trend(slope, math.sqrt(residual / (n - 2) / sxx), n)
