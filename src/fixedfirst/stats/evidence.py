"""What a set of seeds supports: a score over seeds, the paired difference of two arms, a verdict.

A single run's score moves with everything a seed fixes and with the machine's rounding, so a
claim about arms is a claim over seeds: `over_seeds` (an arm's t-interval), `paired` and
`paired_relative` (same-seed differences, sharper than comparing two means), and `sign` and
`verdict`, the words a reader may use; an interval containing zero is "cannot tell", never a
ranking. What the intervals cover is docs/design.md §4.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from fixedfirst.stats.intervals import Interval, t_interval

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
