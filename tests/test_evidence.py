"""Claims over seeds: summaries, paired differences and verdicts on hand-computed cases."""

from __future__ import annotations

import math

import pytest

from fixedfirst.stats.evidence import over_seeds, paired, sign, verdict
from fixedfirst.stats.intervals import Interval

T_975_4 = 2.776445105  # two-sided 95%, 4 degrees of freedom (printed tables)
T_975_2 = 4.302652730


def test_over_seeds_by_hand():
    s = over_seeds({3: 4.0, 0: 1.0, 1: 2.0, 2: 3.0, 4: 5.0})
    half = T_975_4 * math.sqrt(2.5) / math.sqrt(5)
    assert s.mean == 3.0 and s.n == 5 and (s.min, s.max) == (1.0, 5.0)
    assert s.low == pytest.approx(3.0 - half, abs=1e-8)
    assert s.high == pytest.approx(3.0 + half, abs=1e-8)
    assert list(s.values) == [0, 1, 2, 3, 4]  # sorted by seed


def test_a_bounded_quantity_keeps_its_interval_within_its_bounds():
    """Shares of a ceiling 0.90, 0.99, 1.00: the t-interval (by hand) reaches past 1, the cut one
    ends at 1 and keeps its lower end; values inside the bounds leave the interval as it was."""
    shares = {0: 0.90, 1: 0.99, 2: 1.00}
    sd = math.sqrt(((0.90 - 0.9633333) ** 2 + (0.99 - 0.9633333) ** 2 + (1.0 - 0.9633333) ** 2) / 2)
    half = T_975_2 * sd / math.sqrt(3)
    assert 0.9633333 + half > 1.0
    cut = over_seeds(shares, bounds=(0.0, 1.0))
    assert cut.mean == pytest.approx(0.9633333, abs=1e-7)
    assert cut.low == pytest.approx(0.9633333 - half, abs=1e-6) and cut.high == 1.0
    low_end = over_seeds({0: 0.0, 1: 0.0, 2: 0.3}, bounds=(0.0, 1.0))
    assert low_end.low == 0.0 and low_end.high < 1.0
    inside = {0: 0.4, 1: 0.5, 2: 0.6}
    assert over_seeds(inside, bounds=(0.0, 1.0)) == over_seeds(inside)
    with pytest.raises(ValueError, match="outside their bounds"):
        over_seeds({0: 38.9, 1: 1.2}, bounds=(0.0, 1.0))  # bits where a share was meant


def test_one_seed_has_no_interval():
    s = over_seeds({7: 0.25})
    assert (s.mean, s.low, s.high, s.n) == (0.25, None, None, 1)
    with pytest.raises(ValueError):
        over_seeds({})


def test_paired_uses_common_seeds_only():
    # Differences on seeds 0, 1, 2: 1, 2, 3 (seed 9 is in one arm only): mean 2, sd 1.
    a = {0: 11.0, 1: 12.0, 2: 13.0, 9: 100.0}
    b = {0: 10.0, 1: 10.0, 2: 10.0}
    d = paired(a, b)
    half = T_975_2 * 1.0 / math.sqrt(3)
    assert d.n == 3 and d.mean == 2.0
    assert (d.low, d.high) == (pytest.approx(2 - half), pytest.approx(2 + half))
    with pytest.raises(ValueError, match="at least 2 seeds"):
        paired({0: 1.0, 1: 2.0}, {1: 1.0, 5: 1.0})


def test_pairing_removes_what_a_seed_does_to_both_arms():
    # Each seed shifts both arms alike by a large amount; arm a is always 0.1 above b.
    shift = {0: 5.0, 1: -3.0, 2: 8.0, 3: 0.0, 4: -6.0}
    a = {s: 1.1 + v for s, v in shift.items()}
    b = {s: 1.0 + v for s, v in shift.items()}
    d = paired(a, b)
    assert d.low == pytest.approx(0.1) and d.high == pytest.approx(0.1)
    separate = over_seeds(a)
    assert separate.low < over_seeds(b).mean  # unpaired, the arms' intervals overlap widely


def _interval(low: float, high: float) -> Interval:
    return Interval((low + high) / 2, low, high, 1.0, 5, 0.95)


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [(0.1, 0.3, "positive"), (-0.3, -0.1, "negative"), (-0.1, 0.2, "cannot tell")],
)
def test_sign(low, high, expected):
    assert sign(_interval(low, high)) == expected


@pytest.mark.parametrize(
    ("low", "high", "claim", "bound", "expected"),
    [
        (0.001, 0.004, "below", 0.005, "reproduced"),  # wholly within 0.5%
        (0.006, 0.02, "below", 0.005, "not reproduced"),  # wholly beyond it
        (0.003, 0.008, "below", 0.005, "cannot tell"),
        (0.01, 0.02, "above", 0.0, "reproduced"),
        (-0.02, -0.01, "above", 0.0, "not reproduced"),
        (-0.01, 0.02, "above", 0.0, "cannot tell"),
    ],
)
def test_verdict(low, high, claim, bound, expected):
    assert verdict(_interval(low, high), claim, bound) == expected


def test_verdict_rejects_unknown_claim():
    with pytest.raises(ValueError):
        verdict(_interval(0, 1), "equal")  # type: ignore[arg-type]
