"""The plan answers "which depth and phase at step t" itself, for our trainer and for anyone's
loop (`plan_schedule`), and the two ways of building it agree."""

from __future__ import annotations

import pytest

from fixedfirst.compute.flops import FlopModel, flop_model
from fixedfirst.compute.plan import plan_run, plan_schedule
from fixedfirst.config import ScheduleConfig, SwitchConfig, load_config
from fixedfirst.errors import UserError

FIXED_FIRST = ScheduleConfig(kind="fixed-first", k0=2, switch=0.67, k_min=1, k_max=8)
COST = FlopModel(prelude=100.0, iteration=40.0, readout=300.0)


def test_each_step_has_the_depth_and_phase_of_its_stage():
    plan = plan_schedule(FIXED_FIRST, COST, 64, steps=100, seed=3)
    steps = [plan.at(t) for t in range(100)]
    assert [s.step for s in steps] == list(range(100))
    assert all(s.depth == 2 and s.phase == "fixed" for s in steps[:67])
    finish = steps[67:]
    assert all(s.phase == "finish" and 1 <= s.depth <= 8 for s in finish)
    assert len({s.depth for s in finish}) > 3  # drawn, not one depth
    assert plan.switch_step == 67
    assert [plan.depth(t) for t in range(100)] == [s.depth for s in steps]


def test_an_auto_switch_is_k0_until_decided_then_finishes_from_its_step():
    auto = ScheduleConfig(kind="fixed-first", k0=3, switch="auto", k_max=8)
    switch = SwitchConfig(rule="plateau", floor=0.3, ceiling=0.9, window=0.2)
    plan = plan_schedule(auto, COST, 64, steps=200, switch=switch)
    assert plan.switch_window == (60, 180) and plan.switch_step is None
    assert {(plan.at(t).depth, plan.at(t).phase) for t in range(200)} == {(3, "fixed")}
    decided = plan.decided(70)
    assert decided.switch_step == 70
    assert {decided.at(t).phase for t in range(70)} == {"fixed"}
    assert {decided.at(t).phase for t in range(70, 200)} == {"finish"}
    # Decided by the caller up front: the same depths as decided by a rule at that step.
    given = plan_schedule(auto, COST, 64, steps=200, switch_step=70)
    assert [given.depth(t) for t in range(200)] == [decided.depth(t) for t in range(200)]
    assert given.switch is None and given.switch_step == 70


@pytest.mark.parametrize(
    "overrides",
    [
        ["train.flops=5e13"],
        ["train.flops=5e13", "schedule.kind=uniform", "train.seed=2"],
        ["train.flops=5e13", "schedule.switch=auto", "switch.rule=plateau", "train.log_every=1"],
        ["train.tokens=300000", "schedule.finish=poisson-lognormal"],
    ],
)
def test_a_loops_plan_is_the_trainers_plan(overrides):
    """Built once: the public builder, given the run's pieces, plans what `plan_run` plans."""
    config = load_config(None, overrides)
    t = config.train
    ours = plan_run(config)
    budget = {"flops": t.flops} if t.flops is not None else {"steps": ours.total_steps}
    switch = config.switch if config.schedule.auto_switch else None
    cost = flop_model(config.model, t.seq_len)
    theirs = plan_schedule(
        config.schedule, cost, t.tokens_per_step, seed=t.seed, switch=switch, **budget
    )
    assert theirs.total_steps == ours.total_steps
    assert (theirs.flops, theirs.expected_flops) == (ours.flops, ours.expected_flops)
    assert theirs.modeled_savings() == ours.modeled_savings()
    assert [theirs.at(s) for s in range(0, ours.total_steps, 7)] == [
        ours.at(s) for s in range(0, ours.total_steps, 7)
    ]


def test_a_flop_budget_ends_within_one_step_below_it():
    plan = plan_schedule(FIXED_FIRST, COST, 64, flops=2e7)
    step = 64 * max(COST.train(k) for k in range(1, 9))
    assert 2e7 - step < plan.flops <= 2e7
    longer = plan_schedule(FIXED_FIRST, COST, 64, steps=plan.total_steps + 1)
    assert longer.flops > 2e7


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"steps": 10, "flops": 1e9}, "one of them"),
        ({}, "one of them"),
        ({"steps": 10, "switch_step": 4}, "set switch='auto'"),
        ({"steps": 10, "switch": SwitchConfig()}, "set the schedule's switch='auto'"),
        ({"flops": 10.0}, "flops = 10 is below the cost of a single step"),
        ({"steps": 0}, "steps must be between 1"),
    ],
)
def test_a_plan_asked_for_wrongly_is_refused_in_one_line(kwargs, message):
    with pytest.raises(UserError, match=message) as caught:
        plan_schedule(FIXED_FIRST, COST, 64, **kwargs)
    assert "\n" not in str(caught.value)


def test_a_window_too_short_for_a_trend_says_what_a_loop_can_change():
    auto = ScheduleConfig(kind="fixed-first", k0=2, switch="auto", k_max=8)
    with pytest.raises(UserError, match="holds 2 losses.*widen switch.window or plan more steps"):
        plan_schedule(auto, COST, 64, steps=10, switch=SwitchConfig(window=0.2))
