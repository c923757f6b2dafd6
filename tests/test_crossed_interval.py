"""The interval over seeds and a shared held-out set (`crossed_interval`): its coverage by
simulation, its reduction to the t-interval over seeds, and a hand-computed case."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fixedfirst.stats.intervals import crossed_interval, t_interval, t_quantile
from tests.crossed_simulation import crossed_coverage


def test_it_covers_seeds_and_held_out_blocks_where_the_seed_interval_does_not():
    """5 seeds x 32 blocks, var(seed)/S = 0.05 and var(block)/B = 0.125: the crossed interval
    covers the mean about 95% of the time; the t-interval over seed means, blind to the block
    effects that every seed shares, far less often (0.95 and 0.82 in 1,000 replications)."""
    both, seeds_only = crossed_coverage(seed_sd=0.5, block_sd=2.0, noise_sd=1.0)
    assert 0.92 <= both <= 0.985
    assert seeds_only < 0.88


def test_without_held_out_variance_it_keeps_the_seed_coverage():
    both, seeds_only = crossed_coverage(seed_sd=1.0, block_sd=0.0, noise_sd=0.5)
    assert 0.92 <= both <= 0.985 and 0.92 <= seeds_only <= 0.985


def test_one_block_is_the_t_interval_over_seeds():
    y = np.array([[1.0], [1.5], [0.7], [1.2]])
    crossed, t = crossed_interval(y), t_interval(y[:, 0])
    assert (crossed.mean, crossed.low, crossed.high) == pytest.approx((t.mean, t.low, t.high))
    assert crossed.df == 3 and crossed.held_out_share == 0.0


def test_a_hand_computed_three_by_two():
    """y = [[1, 3], [2, 6], [3, 6]]: grand mean 3.5; seed means 2, 4, 4.5; block means 2, 5.
    MS_seeds = 2 * (2.25 + 0.25 + 1) / 2 = 3.5; MS_blocks = 3 * (2.25 + 2.25) / 1 = 13.5;
    residuals [[0.5, -0.5], [-0.5, 0.5], [0, 0]]: MS_residual = 1 / 2 = 0.5.
    var = (3.5 + 13.5 - 0.5) / 6 = 2.75; df = 16.5^2 / (3.5^2/2 + 13.5^2/1 + 0.5^2/2)."""
    interval = crossed_interval([[1.0, 3.0], [2.0, 6.0], [3.0, 6.0]])
    df = 16.5**2 / (3.5**2 / 2 + 13.5**2 + 0.5**2 / 2)
    half = t_quantile(0.975, df) * math.sqrt(2.75)
    assert interval.mean == pytest.approx(3.5)
    assert interval.df == pytest.approx(df)
    assert (interval.low, interval.high) == pytest.approx((3.5 - half, 3.5 + half))
    assert interval.held_out_share == pytest.approx((13.5 - 0.5) / 16.5)


def test_blocks_that_vary_less_than_the_noise_add_nothing():
    """MS_blocks below MS_residual: the block component is taken as zero, leaving MS_seeds/(SB)."""
    y = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 1.0], [2.0, 2.0, 2.0]])
    interval = crossed_interval(y)
    ms_seeds = 3 * np.var(y.mean(axis=1), ddof=1)
    assert interval.se == pytest.approx(math.sqrt(ms_seeds / 9))
    assert interval.held_out_share == 0.0


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="at least 2"):
        crossed_interval([[1.0, 2.0]])
    with pytest.raises(ValueError, match="matrix"):
        crossed_interval([1.0, 2.0])
