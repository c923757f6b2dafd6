"""The interval over seeds and a shared held-out set (`crossed_interval`, `paired_over_rows`): its
coverage by simulation, its reduction to the t-interval over seeds, and hand-computed cases; and
Holm's correction of a family of verdicts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fixedfirst.stats.evidence import holm, paired, paired_over_rows, paired_relative, two_sided_p
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


def test_paired_over_rows_with_one_block_is_the_paired_interval_over_seeds():
    a = {0: [1.10], 1: [1.32], 2: [1.21]}
    b = {0: [1.00], 1: [1.20], 2: [1.15]}
    flat_a, flat_b = ({s: v[0] for s, v in x.items()} for x in (a, b))
    for relative, seed_only in ((True, paired_relative), (False, paired)):
        crossed, t = paired_over_rows(a, b, relative), seed_only(flat_a, flat_b)
        assert (crossed.mean, crossed.low, crossed.high) == pytest.approx((t.mean, t.low, t.high))


def test_the_relative_estimate_is_the_mean_of_each_seeds_whole_set_ratio():
    rng = np.random.default_rng(3)
    a = {s: list(1.3 + 0.1 * rng.standard_normal(8)) for s in range(4)}
    b = {s: list(1.2 + 0.1 * rng.standard_normal(8)) for s in range(4)}
    expected = np.mean([np.mean(a[s]) / np.mean(b[s]) - 1 for s in range(4)])
    assert paired_over_rows(a, b, relative=True).mean == pytest.approx(expected, rel=1e-12)


def test_the_relative_interval_covers_the_population_gap():
    """b = 1 + seed + block + noise effects; a = (1.02 + c_j) b + a seed effect, where c_j
    (sd 0.04) is how much block j favours b: the gap over the whole population of seeds and rows
    is 2%. The 95% interval covers it about 95% of the time; one over the seeds' whole-set gaps
    alone, blind to the blocks every seed shares, far less often (0.96 and 0.82 in 400)."""
    rng = np.random.default_rng(11)
    covered = covered_seeds_only = 0
    replications = 400
    for _ in range(replications):
        base = 1.0 + 0.02 * rng.standard_normal((5, 1)) + 0.05 * rng.standard_normal((1, 32))
        b = base + 0.01 * rng.standard_normal((5, 32))
        favour = 0.04 * rng.standard_normal((1, 32))
        a = (1.02 + favour) * b + 0.01 * rng.standard_normal((5, 1))
        a_blocks, b_blocks = dict(enumerate(a)), dict(enumerate(b))
        interval = paired_over_rows(a_blocks, b_blocks, relative=True)
        covered += interval.low <= 0.02 <= interval.high
        whole = paired_relative(
            {s: a[s].mean() for s in range(5)}, {s: b[s].mean() for s in range(5)}
        )
        covered_seeds_only += whole.low <= 0.02 <= whole.high
    assert 0.92 <= covered / replications <= 0.985
    assert covered_seeds_only / replications < 0.88


def test_holm_by_hand():
    """m = 4, alpha 0.05: 0.005 <= 0.0125 and 0.01 <= 0.05/3 are rejected, 0.03 > 0.025 stops."""
    assert holm([0.01, 0.04, 0.03, 0.005]) == [True, False, False, True]
    assert holm([]) == [] and holm([0.2]) == [False] and holm([0.049]) == [True]


def test_two_sided_p_against_a_t_table():
    """t = 2.776 with 4 degrees of freedom is the 0.975 quantile: p = 0.05 (2.776445105 exactly)."""
    assert two_sided_p(2.776445105, 1.0, 4) == pytest.approx(0.05, abs=1e-8)
    assert two_sided_p(0.3, 0.1, 4, bound=0.3) == pytest.approx(1.0)
