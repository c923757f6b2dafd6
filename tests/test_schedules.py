"""Depth schedules: pure functions of (seed, step), exact switch points, exact expectations."""

from __future__ import annotations

import collections
import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from fixedfirst.config import ScheduleConfig
from fixedfirst.schedules import (
    DRAW_TABLES_KEPT,
    PoissonLogNormal,
    Schedule,
    Uniform,
    _clipped_pmf,
    fraction_step,
    poisson_lognormal,
    shared_draws,
)

ALL = [
    ScheduleConfig(kind="fixed", depth=3),
    ScheduleConfig(kind="uniform"),
    ScheduleConfig(kind="poisson-lognormal", mean=6.0),
    ScheduleConfig(kind="progressive", mean=8.5, warmup=0.5),
    ScheduleConfig(kind="fixed-first", k0=2, switch=0.67),
    ScheduleConfig(kind="fixed-first", k0=4, switch=0.8, finish="poisson-lognormal"),
]


@pytest.mark.parametrize("config", ALL, ids=lambda c: c.kind)
def test_depth_is_a_pure_function_of_seed_and_step(config):
    total = 300
    forward = [Schedule(config, seed=5).depth(s, total) for s in range(total)]
    backward = [Schedule(config, seed=5).depth(s, total) for s in reversed(range(total))]
    assert forward == backward[::-1]
    assert Schedule(config, seed=5).depths(total) == forward
    other_seed = Schedule(config, seed=6).depths(total)
    if config.kind != "fixed":
        assert other_seed != forward
    assert all(1 <= k <= max(config.k_max, config.depth) for k in forward)


def test_depths_shared_between_schedules_are_each_seeds_own_draws():
    """The schedules of a process share what they drew (`shared_draws`): a depth is still the
    draw of its own (seed, step), for a second seed, for a second schedule of the first seed, and
    once the process has let that seed's table go."""
    config = ScheduleConfig(kind="uniform")

    def afresh(seed: int, total: int) -> list[int]:
        dist = Uniform(config.k_min, config.k_max)
        return [dist.sample(np.random.default_rng([seed, step])) for step in range(total)]

    assert Schedule(config, seed=5).depths(40) == afresh(5, 40)
    assert Schedule(config, seed=6).depths(40) == afresh(6, 40)
    assert Schedule(config, seed=5).depths(50) == afresh(5, 50)
    for seed in range(100, 101 + DRAW_TABLES_KEPT):
        shared_draws(seed, Uniform(config.k_min, config.k_max))  # seed 5's table goes
    assert Schedule(config, seed=5).depths(60) == afresh(5, 60)


@pytest.mark.parametrize(
    ("total", "switch", "first_finish"),
    [(100, 0.67, 67), (3, 0.67, 3), (10, 0.8, 8), (7, 0.0, 0), (7, 1.0, 7)],
)
def test_fixed_first_switches_at_exactly_the_right_step(total, switch, first_finish):
    schedule = Schedule(ScheduleConfig(kind="fixed-first", k0=4, switch=switch), seed=0)
    assert schedule.switch_step(total) == first_finish
    for step in range(total):
        stage = schedule.stage_at(step, total)
        assert stage.phase == ("fixed" if step < switch * total else "finish")
        if stage.phase == "fixed":
            assert schedule.depth(step, total) == 4


def test_switch_step_is_the_exact_decimal_ceiling_where_float_round_off_matters():
    """The switch fraction as written (a decimal) times the run length, rounded up, in exact
    rational arithmetic. Products such as 0.07 x 100 = 7.000000000000001 are where float
    arithmetic alone would put the switch one step late."""
    fractions = [0.07, 0.14, 0.15, 0.28, 0.29, 0.35, 0.55, 0.57, 0.58, 0.67, 0.7, 0.8, 0.9]
    late = 0
    for switch in fractions:
        schedule = Schedule(ScheduleConfig(kind="fixed-first", k0=2, switch=switch))
        for total in range(1, 301):
            exact = math.ceil(Fraction(str(switch)) * total)
            assert fraction_step(switch, total) == exact, (switch, total)
            late += math.ceil(switch * total) != exact
        assert [schedule.switch_step(n) for n in (7, 100, 299)] == [
            math.ceil(Fraction(str(switch)) * n) for n in (7, 100, 299)
        ]
    assert late > 0  # the grid holds products that round-off pushes past an integer


def test_uniform_and_pln_sampled_means_match_formulas():
    rng = np.random.default_rng(0)
    u = Uniform(1, 16)
    assert u.mean == pytest.approx(8.5)
    assert np.mean([u.sample(rng) for _ in range(40000)]) == pytest.approx(8.5, abs=0.06)
    # Without a binding clip, E[K] = mean (E[rate] = mean - 1).
    pln = PoissonLogNormal(mean_depth=5.0, sigma=0.5, k_max=200)
    assert sum(pln.pmf().values()) == pytest.approx(1.0, abs=1e-12)
    assert pln.mean == pytest.approx(5.0, abs=1e-9)
    samples = [pln.sample(rng) for _ in range(40000)]
    assert np.mean(samples) == pytest.approx(5.0, abs=0.05)
    # With the clip at 16, the exact pmf still matches a sampled histogram, and the mean is
    # the mean after the clip: the pre-clip rate is raised above mean - 1 to make up for it.
    clipped = PoissonLogNormal(mean_depth=8.5, sigma=0.5, k_max=16)
    samples = np.array([clipped.sample(rng) for _ in range(40000)])
    assert clipped.mean == pytest.approx(8.5, abs=1e-9)
    assert clipped.rate > 7.5 + 0.3
    assert samples.mean() == pytest.approx(8.5, abs=0.05)
    for k, p in clipped.pmf().items():
        assert np.mean(samples == k) == pytest.approx(p, abs=0.01)


def test_progressive_ramps_to_its_mean():
    config = ScheduleConfig(kind="progressive", mean=8.0, warmup=0.5, ramp="sqrt")
    schedule = Schedule(config)
    total = 1000
    means = [schedule.progressive_mean(s, total) for s in range(total)]
    assert means[0] == 1
    assert means == sorted(means)
    assert all(m == 8.0 for m in means[500:])
    # m(t) = max(1, ceil(8 (1 - sqrt(1 - t / 500)))): 8 x 0.106 = 0.84, 8 x 0.293 = 2.34,
    # 8 x 0.553 = 4.42, 8 x 0.8 = 6.4 (a linear ramp would give 2, 4, 7, 8).
    assert [means[t] for t in (100, 250, 400, 480)] == [1, 3, 5, 7]
    stages = schedule.stages(total)
    assert stages[0].start == 0 and stages[-1].end == total
    assert all(a.end == b.start for a, b in itertools.pairwise(stages))


@pytest.mark.parametrize(
    ("mean", "warmup", "ramp", "total"),
    [(8.0, 0.5, "sqrt", 1000), (8.5, 0.25, "linear", 12_345), (3.3, 1.0, "sqrt", 7),
     (15.5, 0.05, "linear", 40), (2.0, 1 / 3, "sqrt", 1), (12.0, 0.77, "linear", 2_001)],
)  # fmt: skip
def test_progressive_stages_are_the_runs_of_equal_means_step_by_step(mean, warmup, ramp, total):
    """The stages (found by bisection) against every step's mean grouped in order."""
    config = ScheduleConfig(kind="progressive", mean=mean, warmup=warmup, ramp=ramp)
    schedule = Schedule(config)
    runs: list[list] = []  # [start, end, mean]
    for step in range(total):
        m = schedule.progressive_mean(step, total)
        if runs and runs[-1][2] == m:
            runs[-1][1] = step + 1
        else:
            runs.append([step, step + 1, m])
    stages = schedule.stages(total)
    assert [(s.start, s.end) for s in stages] == [(a, b) for a, b, _ in runs]
    for stage, (_, _, m) in zip(stages, runs, strict=True):
        assert stage.dist == poisson_lognormal(m, config.sigma, config.k_max)
        assert stage.phase == ("full" if m == mean else "ramp")


@pytest.mark.parametrize("config", ALL, ids=lambda c: c.kind)
def test_the_histograms_cost_what_the_steps_cost(config):
    cost = lambda k: 3.0 + 2.0 * k  # noqa: E731 - a cost linear in depth, like the FLOP model
    total = 4000
    schedule = Schedule(config, seed=1)
    exact = schedule.expected_histogram(total).total(cost)
    realised = sum(cost(k) for k in schedule.depths(total))
    assert realised == pytest.approx(exact, rel=0.02)
    assert schedule.histogram(total).total(cost) == pytest.approx(realised, rel=1e-12)
    drawn = collections.Counter(schedule.depths(total))
    assert schedule.histogram(total).steps() == dict(sorted(drawn.items()))
    if config.kind == "fixed":
        assert realised == exact


def test_stages_cover_the_run_without_gaps():
    for config in ALL:
        for total in (1, 2, 17, 1000):
            stages = Schedule(config).stages(total)
            assert stages[0].start == 0 and stages[-1].end == total
            assert all(a.end == b.start for a, b in itertools.pairwise(stages))
            assert sum(s.steps for s in stages) == total


def test_pln_clip_without_solving_would_lose_compute():
    """Huginn's parameterisation (E[rate] = mean - 1) gives a true mean of 8.19 at mean 8.5 and
    k_max 16: a Poisson-lognormal finish would train 3.6% shallower than the uniform finish it
    is compared with. Ours has the same mean depth, so the two cost the same."""
    naive = _clipped_pmf(7.5, 0.5, 16)
    assert sum(k * p for k, p in naive.items()) == pytest.approx(8.19, abs=0.01)
    for kind in ("poisson-lognormal", "progressive"):
        config = ScheduleConfig(kind=kind, k_max=16, warmup=0.5)
        stages = Schedule(config).stages(1000)
        assert stages[-1].dist.mean == pytest.approx(8.5, abs=1e-9)
    finish = Schedule(ScheduleConfig(kind="fixed-first", finish="poisson-lognormal")).stages(100)
    assert finish[-1].dist.mean == pytest.approx(Uniform(1, 16).mean, abs=1e-9)


@pytest.mark.parametrize("mean", [1.2, 3.0, 8.5, 12.0, 15.5])
def test_pln_mean_is_the_mean_after_the_clip(mean):
    dist = PoissonLogNormal(mean_depth=mean, sigma=0.5, k_max=16)
    assert sum(dist.pmf().values()) == pytest.approx(1.0, abs=1e-12)
    assert dist.mean == pytest.approx(mean, abs=1e-9)
