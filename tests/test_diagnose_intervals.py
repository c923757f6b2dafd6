"""The interval arithmetic of the update diagnostic: the t-interval against printed tables and by
hand; the two-way bootstrap by simulation (coverage) and by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fixedfirst.stats.intervals import (
    regularized_incomplete_beta,
    t_interval,
    t_quantile,
    two_way_bootstrap,
)
from tests.crossed_simulation import coverage, crossed

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


# The two-way bootstrap: X[b, j] over training batches b and held-out sequences j.


def test_bootstrap_covers_both_kinds_of_unit_and_the_row_t_interval_does_not():
    """Held-out sequences vary twice as much as batches (32 of each, as in the diagnostic): the
    bootstrap covers mu about 95% of the time; a t-interval over batches, which holds the
    sequences fixed, far less often (docs/diagnose/bootstrap-coverage.md for more cases)."""
    bootstrap, rows_only = coverage(1.0, 2.0, 1.0, replications=600, rows=32, columns=32)
    assert 0.93 <= bootstrap <= 0.98
    assert rows_only < 0.75


def test_bootstrap_is_conservative_when_the_interaction_dominates():
    """Pure noise (no row or column effect): the pigeonhole bootstrap counts the interaction up
    to three times (docs/design.md §6), so it over-covers, never under-covers."""
    bootstrap, _ = coverage(row_sd=0.0, column_sd=0.0, noise_sd=1.0, replications=100)
    assert bootstrap >= 0.97


def test_bootstrap_is_deterministic_under_a_seed():
    x = crossed(np.random.default_rng(1), 8, 6, 0.0, 1.0, 1.0, 1.0)
    first, again = two_way_bootstrap(x, seed=5), two_way_bootstrap(x, seed=5)
    assert (first.low, first.high, first.se) == (again.low, again.high, again.se)
    other = two_way_bootstrap(x, seed=6)
    assert (other.low, other.high) != (first.low, first.high)
    assert other.mean == first.mean == pytest.approx(x.mean(), abs=1e-15)


def test_constant_matrix_gives_a_zero_width_interval():
    interval = two_way_bootstrap(np.full((5, 7), 0.25), seed=3)
    assert interval.mean == pytest.approx(0.25, abs=1e-15)
    assert interval.low == pytest.approx(0.25, abs=1e-15)
    assert interval.high == pytest.approx(0.25, abs=1e-15)
    assert interval.se == pytest.approx(0.0, abs=1e-15)
    assert not interval.contains_zero
    # Unequal weights too: a resample divides by the weight it drew, not the original total.
    weighted = two_way_bootstrap(np.full((3, 4), 0.25), seed=3, column_weights=[1, 5, 2, 9])
    assert (weighted.low, weighted.high) == pytest.approx((0.25, 0.25), abs=1e-15)


@pytest.mark.parametrize("axis", [0, 1])
def test_effects_of_one_kind_only_give_about_the_t_interval(axis):
    """X[b, j] = r_b (or = c_j): resampling the other kind changes nothing, and the percentile
    interval is close to that unit's t-interval (a little narrower: z, and the n - 1 of sd)."""
    values = np.random.default_rng(7).normal(0.3, 1.0, size=30)
    x = np.repeat(values[:, None], 12, axis=1)
    x = x if axis == 0 else x.T
    both = two_way_bootstrap(x, resamples=20000, seed=0)
    one = two_way_bootstrap(x, resamples=20000, seed=0, over="rows" if axis == 0 else "columns")
    assert (both.low, both.high) == pytest.approx((one.low, one.high), abs=1e-12)
    t = t_interval(values)
    assert both.mean == pytest.approx(t.mean, abs=1e-12)
    assert both.high - both.low == pytest.approx(t.high - t.low, rel=0.1)
    assert both.se == pytest.approx(t.sd / math.sqrt(30), rel=0.05)


def test_two_by_two_bootstrap_distribution_by_hand():
    """x = [[0, 0], [0, 4]]: a resample's mean is c * d, c and d the draws of row 2 and column 2
    (each 0, 1, 2 with probability 1/4, 1/2, 1/4, independent): 0 w.p. 7/16, 1 w.p. 1/4, 2 w.p.
    1/4, 4 w.p. 1/16; mean 1, variance 1.25. (Rows and columns drawn alike would give 3.5.)"""
    interval = two_way_bootstrap([[0.0, 0.0], [0.0, 4.0]], resamples=40000, seed=0)
    assert interval.mean == 1.0
    assert interval.se == pytest.approx(math.sqrt(1.25), rel=0.02)
    assert (interval.low, interval.high) == (0.0, 4.0)
    # Rows only: the mean is (0 + 2c) / 2 = c, 0, 1, 2 with 1/4, 1/2, 1/4: sd sqrt(1/2).
    rows_only = two_way_bootstrap([[0.0, 0.0], [0.0, 4.0]], resamples=40000, over="rows")
    assert rows_only.se == pytest.approx(math.sqrt(0.5), rel=0.02)
    assert (rows_only.low, rows_only.high) == (0.0, 2.0)


def test_column_weights_give_the_weighted_mean_and_drop_empty_columns():
    x = np.array([[1.0, 3.0, 50.0, 2.0], [2.0, 4.0, -50.0, 2.0]])
    weights = [3.0, 1.0, 0.0, 2.0]
    interval = two_way_bootstrap(x, seed=4, column_weights=weights)
    # (3 * 1.5 + 1 * 3.5 + 2 * 2) / 6 = 2.0
    assert interval.mean == pytest.approx(2.0, abs=1e-14)
    assert interval.columns == 3
    kept = two_way_bootstrap(x[:, [0, 1, 3]], seed=4, column_weights=[3.0, 1.0, 2.0])
    assert (interval.low, interval.high) == (kept.low, kept.high)
    # Equal weights are the plain grand mean.
    assert two_way_bootstrap(x, column_weights=[2.0] * 4).mean == pytest.approx(x.mean())


@pytest.mark.parametrize(
    ("x", "kwargs", "message"),
    [
        ([1.0, 2.0], {}, "matrix"),
        ([[1.0, 2.0]], {}, "rows needs at least 2"),
        ([[1.0], [2.0]], {}, "columns needs at least 2"),
        ([[1.0, float("nan")], [2.0, 3.0]], {}, "finite"),
        ([[1.0, 2.0], [2.0, 3.0]], {"column_weights": [1.0, -1.0]}, "column_weights"),
        ([[1.0, 2.0], [2.0, 3.0]], {"column_weights": [1.0]}, "column_weights"),
        ([[1.0, 2.0], [2.0, 3.0]], {"over": "sideways"}, "over must be"),
        ([[1.0, 2.0], [2.0, 3.0]], {"level": 1.0}, "level"),
    ],
)
def test_bootstrap_refuses_what_it_cannot_resample(x, kwargs, message):
    with pytest.raises(ValueError, match=message):
        two_way_bootstrap(x, **kwargs)


def test_one_row_is_enough_when_only_columns_are_resampled():
    interval = two_way_bootstrap([[1.0, 2.0, 3.0]], over="columns", resamples=4000)
    assert interval.mean == 2.0 and interval.low < 2.0 < interval.high
