"""The auto switch's rules on synthetic series whose right switch step is known; no look-ahead;
the state a checkpoint keeps continues to the same decision (docs/design.md §14)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fixedfirst.config import SwitchConfig
from fixedfirst.switching.policy import SwitchPolicy, replay
from fixedfirst.switching.trend import fit_trend

N = 1000  # steps of the synthetic runs


def kinked(kink: float, drop: float, noise: float, every: int, seed: int = 0) -> list:
    """A series that falls by `drop` per unit fraction of the run until `kink`, then stays flat,
    observed every `every` steps with Gaussian noise."""
    rng = np.random.default_rng(seed)
    steps = range(every, N + 1, every)
    return [(s, 3.0 - drop * min(s / N, kink) + float(rng.normal(0.0, noise))) for s in steps]


PLATEAU = SwitchConfig(rule="plateau", floor=0.5, ceiling=0.9, every=10, window=0.1)
DEPTH_GAP = SwitchConfig(rule="depth-gap", floor=0.5, ceiling=0.9, every=10, window=0.1)


def test_trend_recovers_a_line_and_its_noise():
    xs = [i / 10 for i in range(11)]
    exact = fit_trend(xs, [2.0 - 0.5 * x for x in xs])
    assert exact.slope == pytest.approx(-0.5) and exact.stderr == pytest.approx(0.0, abs=1e-12)
    rng = np.random.default_rng(1)
    slopes, errors = [], []
    for _ in range(400):
        fit = fit_trend(xs, [2.0 - 0.5 * x + rng.normal(0, 0.1) for x in xs])
        slopes.append(fit.slope)
        errors.append(fit.stderr)
    # The standard error says how far the slope wanders: about as far as it does.
    assert np.std(slopes) == pytest.approx(np.mean(errors), rel=0.15)
    assert fit_trend([0.1, 0.2], [1.0, 2.0]) is None
    assert fit_trend([0.3] * 5, [1.0, 2.0, 3.0, 4.0, 5.0]) is None


def test_plateau_switches_once_the_loss_has_flattened():
    """Loss falls 2 nats per unit of the run until 70% of it, then is flat (noise 0.02 per
    logged step): the right switch is at step 700, as soon as the window has seen the flat."""
    decision, checks = replay(PLATEAU, N, kinked(0.7, 2.0, 0.02, every=1))
    assert decision.reason == "rule" and decision.rule == "plateau"
    assert 700 < decision.step <= 800  # within one window after the kink
    assert all(not c.fires for c in checks[:-1]) and checks[-1].fires
    assert all(c.decrease > 1.0 for c in checks if c.step <= 700)


def test_depth_gap_switches_once_the_gain_stops_shrinking():
    """The gain from depth shrinks by 0.2 nats per unit of the run until 60%, then holds (probes
    every 10 steps, noise 0.001): the right switch is at step 600."""
    decision, _ = replay(DEPTH_GAP, N, kinked(0.6, 0.2, 0.001, every=10))
    assert decision.reason == "rule"
    assert 600 < decision.step <= 700


def test_a_growing_gain_switches_at_the_floor():
    rising = [(s, 0.01 + 0.1 * s / N) for s in range(10, N + 1, 10)]
    decision, _ = replay(DEPTH_GAP, N, rising)
    assert (decision.step, decision.reason) == (500, "rule")


def test_a_series_that_never_flattens_switches_at_the_ceiling():
    decision, checks = replay(PLATEAU, N, kinked(1.0, 2.0, 0.02, every=1))
    assert (decision.step, decision.reason, decision.fraction) == (900, "ceiling", 0.9)
    assert decision.tag == "auto-ceiling"
    assert checks[0].step == 500 and checks[-1].step == 900


def test_floor_and_ceiling_hold_for_a_series_flat_from_the_start():
    flat = kinked(0.0, 2.0, 0.02, every=1)
    assert replay(PLATEAU, N, flat)[0].step == 500
    late = SwitchConfig(rule="plateau", floor=0.73, ceiling=0.9, every=10, window=0.1)
    assert replay(late, N, flat)[0].step == 730  # the first check is at the floor itself
    pinned = SwitchConfig(rule="plateau", floor=0.6, ceiling=0.6, every=7, window=0.1)
    assert replay(pinned, N, kinked(1.0, 2.0, 0.02, every=1))[0].step == 600


def test_the_rule_never_looks_ahead():
    """The same prefix gives the same checks and the same decision, whatever comes after."""
    series = kinked(0.7, 2.0, 0.02, every=1)
    decision, checks = replay(PLATEAU, N, series)
    for cut in (520, 650, decision.step):
        rng = np.random.default_rng(cut)
        future = [(s, v + float(rng.normal(0, 5.0))) for s, v in series if s > cut]
        other, other_checks = replay(PLATEAU, N, [p for p in series if p[0] <= cut] + future)
        kept = [c for c in checks if c.step <= cut]
        assert [c for c in other_checks if c.step <= cut] == kept
        if cut >= decision.step:
            assert other == decision


def test_the_checkpointed_state_continues_to_the_same_decision():
    series = kinked(0.7, 2.0, 0.02, every=1)
    straight, _ = replay(PLATEAU, N, series)
    policy = SwitchPolicy(PLATEAU, N)
    for step, value in series[:733]:
        policy.observe(step, value)
        policy.decide(step)
    assert policy.decision is None
    resumed = SwitchPolicy(PLATEAU, N)
    resumed.load_state_dict(json.loads(json.dumps(policy.state_dict())))
    assert resumed.observations == policy.observations  # floats survive JSON exactly
    for step, value in series[733:]:
        resumed.observe(step, value)
        _, decision = resumed.decide(step)
        if decision is not None:
            break
    assert decision == straight
    assert resumed.state_dict()["decision"]["step"] == straight.step


def test_the_window_keeps_only_what_the_rule_reads():
    policy = SwitchPolicy(PLATEAU, N)
    for step in range(1, 301):
        policy.observe(step, 1.0)
    assert [s for s, _ in policy.observations] == list(range(201, 301))
    with pytest.raises(ValueError, match="after one at 300"):
        policy.observe(300, 1.0)
