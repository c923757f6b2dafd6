"""Simulated crossed designs X[b, j] = mu + u_b + v_j + e_bj, for the coverage of the two-way
bootstrap: used by tests/test_diagnose_intervals.py and scripts/bootstrap_coverage.py."""

from __future__ import annotations

import numpy as np

from fixedfirst.stats.intervals import t_interval, two_way_bootstrap

MU = 0.7


def crossed(rng, rows, columns, mu, row_sd, column_sd, noise_sd):
    """X[b, j] = mu + u_b + v_j + e_bj with normal random effects."""
    return (
        mu
        + row_sd * rng.standard_normal((rows, 1))
        + column_sd * rng.standard_normal((1, columns))
        + noise_sd * rng.standard_normal((rows, columns))
    )


def coverage(
    row_sd, column_sd, noise_sd, replications=300, rows=24, columns=24, seed=2024, level=0.95
):
    """(two-way bootstrap, t over row means): how often each `level` interval covers mu."""
    rng = np.random.default_rng(seed)
    covered_bootstrap = covered_t = 0
    for r in range(replications):
        x = crossed(rng, rows, columns, MU, row_sd, column_sd, noise_sd)
        interval = two_way_bootstrap(x, level, resamples=1000, seed=r)
        covered_bootstrap += interval.low <= MU <= interval.high
        rows_only = t_interval(x.mean(axis=1), level)
        covered_t += rows_only.low <= MU <= rows_only.high
    return covered_bootstrap / replications, covered_t / replications


def crossed_coverage(
    seed_sd, block_sd, noise_sd, replications=400, seeds=5, blocks=32, seed=7, level=0.95
):
    """(crossed_interval, t over seed means): how often each `level` interval covers mu, for a
    seeds x held-out blocks design with normal effects."""
    from fixedfirst.stats.intervals import crossed_interval

    rng = np.random.default_rng(seed)
    covered_crossed = covered_seeds = 0
    for _ in range(replications):
        y = crossed(rng, seeds, blocks, MU, seed_sd, block_sd, noise_sd)
        interval = crossed_interval(y, level)
        covered_crossed += interval.low <= MU <= interval.high
        over_seeds = t_interval(y.mean(axis=1), level)
        covered_seeds += over_seeds.low <= MU <= over_seeds.high
    return covered_crossed / replications, covered_seeds / replications
