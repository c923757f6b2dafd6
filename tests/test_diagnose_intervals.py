"""The t-interval arithmetic of the update diagnostic, against printed tables and by hand."""

from __future__ import annotations

import math

import pytest

from fixedfirst.intervals import (
    regularized_incomplete_beta,
    t_interval,
    t_quantile,
)

# Two-sided critical values from standard Student-t tables: (p, df) -> t.
T_TABLE = {
    (0.975, 1): 12.706204736,
    (0.975, 2): 4.302652730,
    (0.975, 4): 2.776445105,
    (0.975, 10): 2.228138852,
    (0.975, 31): 2.039513446,
    (0.995, 9): 3.249835542,
    (0.95, 30): 1.697260887,
}


@pytest.mark.parametrize(("p", "df"), list(T_TABLE))
def test_t_quantile_matches_tables(p, df):
    assert t_quantile(p, df) == pytest.approx(T_TABLE[(p, df)], abs=2e-8)
    assert t_quantile(1 - p, df) == pytest.approx(-T_TABLE[(p, df)], abs=2e-8)


def test_t_quantile_tends_to_the_normal():
    assert t_quantile(0.975, 1e7) == pytest.approx(1.959963985, abs=1e-6)


def test_incomplete_beta_closed_forms():
    # I_x(1, 1) = x; I_x(a, 1) = x^a; I_x(1, b) = 1 - (1 - x)^b.
    for x in (0.1, 0.5, 0.93):
        assert regularized_incomplete_beta(1, 1, x) == pytest.approx(x, abs=1e-13)
        assert regularized_incomplete_beta(3.5, 1, x) == pytest.approx(x**3.5, abs=1e-13)
        expected = 1 - (1 - x) ** 2.5
        assert regularized_incomplete_beta(1, 2.5, x) == pytest.approx(expected, abs=1e-13)


def test_interval_by_hand():
    # 1..5: mean 3, sd sqrt(2.5), n 5, t_{0.975, 4} = 2.776445105 -> half-width 1.963243.
    interval = t_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    half = 2.776445105 * math.sqrt(2.5) / math.sqrt(5)
    assert interval.mean == 3.0
    assert interval.sd == pytest.approx(math.sqrt(2.5))
    assert interval.low == pytest.approx(3.0 - half, abs=1e-8)
    assert interval.high == pytest.approx(3.0 + half, abs=1e-8)
    assert half == pytest.approx(1.963243, abs=1e-6)
    assert not interval.contains_zero


def test_interval_contains_zero_and_level():
    samples = [-0.5, 0.2, 0.9, -0.1, 0.4, 0.3]
    wide, narrow = t_interval(samples, 0.99), t_interval(samples, 0.5)
    assert wide.low < narrow.low < narrow.high < wide.high
    assert wide.contains_zero
    assert t_interval([1.0, 1.1, 0.9, 1.05], 0.95).contains_zero is False
    assert t_interval([1.0, -1.1, 0.9, -1.05], 0.95).contains_zero is True


def test_interval_needs_two_samples():
    with pytest.raises(ValueError, match="at least 2"):
        t_interval([1.0])
