"""Difficulty bands of the chains task: the training range split in halves, then beyond it.

With the default max_ops = 8 and eval_ops = 32: 0..4 (easy, in range), 5..8 (hard, in range),
9..16 (up to twice the training range), 17..32 (beyond that). Reports, figures and the task
metric all speak of these bands.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from fixedfirst.tasks.chains.program import ChainsOptions

Role = Literal["easy", "hard", "near", "far"]
ROLES: tuple[str, ...] = get_args(Role)
"""The bands by role, in the order `bands_of` gives them: the training range's halves, up to
twice it, beyond."""


@dataclass(frozen=True)
class Band:
    low: int
    high: int
    in_range: bool

    @property
    def label(self) -> str:
        return f"{self.low}..{self.high}" if self.high > self.low else str(self.low)


def bands_of(options: ChainsOptions) -> list[Band]:
    """In range: 0..half and half+1..max_ops; beyond: up to 2 max_ops, then up to eval_ops."""
    m, e = options.max_ops, options.eval_ops
    half = m // 2
    bands = [Band(0, half, True)]
    if m > half:
        bands.append(Band(half + 1, m, True))
    if e > m:
        bands.append(Band(m + 1, min(2 * m, e), False))
    if e > 2 * m:
        bands.append(Band(2 * m + 1, e, False))
    return bands


def band_roles(bands: dict[str, dict[str, Any]]) -> dict[str, str]:
    """role -> band label, from scores' bands (label -> {"in_range", ...}) in the order
    `bands_of` gives them (in range, then beyond)."""
    labels = list(bands)
    in_range = [b for b in labels if bands[b]["in_range"]]
    beyond = [b for b in labels if not bands[b]["in_range"]]
    return dict(zip(ROLES, [*in_range, *beyond], strict=False))
