"""A study report's two kinds of comparison: primary ones, each decided by its own interval, and
the exploratory rest, whose verdicts are corrected together.

A rerun on another machine is a new draw, and among the many same-seed differences a report
computes several lie near the edge of their 95% intervals, so uncorrected verdicts move between
a direction and "cannot tell" from one draw to the next. A study therefore names a few primary
comparisons in its preset before its runs, each decided at 95% by its own interval (against
zero, or against a bar: `bar_verdict`); every other difference its analysis computes is
exploratory and gets a two-sided p-value against zero and a verdict corrected over that whole
family by Holm's method (`correct_family`), the rule the sweep applies to its exploratory claims
(`studies/sweep/claims.py`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from fixedfirst.stats.evidence import holm, two_sided_p

BarVerdict = Literal["meets the bar", "below the bar", "cannot tell"]


def bar_verdict(low: float, high: float, bar: float) -> BarVerdict:
    """A quantity claimed to be at least `bar`: "meets the bar" when its interval's lower end is
    at or above it, "below the bar" when the upper end is under it, else "cannot tell"."""
    if low >= bar:
        return "meets the bar"
    if high < bar:
        return "below the bar"
    return "cannot tell"


def primary_verdict(low: float, high: float, bar: float | None) -> str:
    """A primary comparison's verdict from its own interval: claimed above zero (`bar` None),
    "higher" when the interval lies above zero, "lower" when below, else "cannot tell";
    claimed at least `bar`, `bar_verdict`."""
    if bar is not None:
        return bar_verdict(low, high, bar)
    if low > 0:
        return "higher"
    if high < 0:
        return "lower"
    return "cannot tell"


def correct_family(differences: Sequence[dict[str, Any]]) -> None:
    """Give each same-seed difference of the family (an `Interval.to_dict()` with its `sign`) its
    two-sided p-value against zero, `p`, and `holm`: its sign where Holm's method over the whole
    family rejects zero at 5% family-wise error, otherwise "cannot tell"."""
    p_values = [
        two_sided_p(d["mean"], d["sd"] / math.sqrt(d["n"]), d["n"] - 1) for d in differences
    ]
    for d, p, rejected in zip(differences, p_values, holm(p_values), strict=True):
        d["p"] = p
        d["holm"] = d["sign"] if rejected else "cannot tell"
