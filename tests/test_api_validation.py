"""The Python API keeps the configuration file's promises (issue 67): a section built in code is
held to the types and choices its file is, `plan_schedule` and `DepthScheduler` check their
arguments, and the measured compute model refuses what it cannot model (a model whose depth
lengthens its sequence, one that draws its own depth, a `loss()` that is not the loss), each in
one line that names the argument and the way forward. Small models of the test's own."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from fixedfirst.compute.flops import FlopModel
from fixedfirst.compute.measured import measure_flops
from fixedfirst.compute.plan import plan_schedule
from fixedfirst.config import ModelConfig, ScheduleConfig, SwitchConfig, TrainConfig, build_section
from fixedfirst.errors import UserError
from fixedfirst.model.handles import depth_handle
from fixedfirst.scheduling.depth_scheduler import DepthScheduler

LINEAR = FlopModel(prelude=10.0, iteration=5.0, readout=20.0)
FIXED_FIRST = ScheduleConfig(kind="fixed-first", k0=1, switch=0.5, k_min=1, k_max=4)
AUTO = ScheduleConfig(kind="fixed-first", k0=1, switch="auto", k_min=1, k_max=4)


def one_line_error(call) -> str:
    with pytest.raises(UserError) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message
    return message


# -- sections built in code ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "kwargs", "words"),
    [
        (ScheduleConfig, {"switch": "0.7"}, "schedule.switch: expected a number or 'auto'"),
        (ScheduleConfig, {"finish": "unif"}, "schedule.finish: 'unif' is not one of"),
        (ScheduleConfig, {"k0": "2"}, "schedule.k0: expected an integer, got '2'"),
        (ScheduleConfig, {"kind": "Fixed"}, "schedule.kind: 'Fixed' is not one of"),
        (SwitchConfig, {"rule": "Plateau"}, "switch.rule: 'Plateau' is not one of"),
        (SwitchConfig, {"every": 2.5}, "switch.every: expected an integer"),
        (TrainConfig, {"snapshots": (0.5,)}, "train.snapshots: expected a list"),
        (ModelConfig, {"coda_norm": 1}, "model.coda_norm: expected true or false"),
    ],
)
def test_a_section_built_in_code_refuses_what_its_file_refuses(section, kwargs, words):
    """The same words as the file's (`build_section`, the configuration's path), from the same
    annotations: one source of truth."""
    in_code = one_line_error(lambda: section(**kwargs))
    assert words in in_code
    if not isinstance(next(iter(kwargs.values())), tuple):  # TOML has no tuples
        assert one_line_error(lambda: build_section(section, kwargs)) == in_code


def test_a_section_built_in_code_takes_what_its_file_takes():
    assert ScheduleConfig(k0=2.0).k0 == 2 and isinstance(ScheduleConfig(k0=2.0).k0, int)
    assert ScheduleConfig(switch=1).switch == 1.0 and ScheduleConfig(switch="auto").auto_switch
    assert SwitchConfig(rule="depth-gap").rule == "depth-gap"


def test_a_refused_switch_never_becomes_an_auto_switch_half_a_run_in():
    """Before: switch="0.7" was an auto switch, rule="Plateau" a KeyError at the floor."""
    one_line_error(lambda: plan_schedule(ScheduleConfig(switch="0.7"), LINEAR, 64, steps=60))
    one_line_error(lambda: SwitchConfig(rule="Plateau").rule_threshold)


# -- plan_schedule's arguments ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"tokens_per_step": 0}, "tokens_per_step must be the tokens of one optimizer step"),
        ({"tokens_per_step": -64}, "(>= 1), got -64"),
        ({"tokens_per_step": "64"}, "tokens_per_step: expected an integer, got '64'"),
        ({"steps": "60"}, "steps: expected an integer, got '60'"),
        ({"steps": 60, "flops": None, "seed": -1}, "seed: must be in [0, 2**63 - 1]"),
        ({"steps": None, "flops": "1e9"}, "flops: expected a number, got '1e9'"),
        ({"steps": None, "flops": -1.0}, "flops: the FLOP budget must be > 0"),
    ],
)
def test_plan_schedule_checks_its_arguments(kwargs, words):
    args = {"tokens_per_step": 64, "steps": 60, **kwargs}
    tokens = args.pop("tokens_per_step")
    assert words in one_line_error(lambda: plan_schedule(FIXED_FIRST, LINEAR, tokens, **args))


def test_a_switch_step_outside_the_plan_is_refused():
    """Past the end it never switched; negative was a raw ValueError."""
    past = one_line_error(lambda: plan_schedule(AUTO, LINEAR, 64, steps=60, switch_step=60))
    assert "past the plan's last step (59)" in past and "0..59" in past
    negative = one_line_error(lambda: plan_schedule(AUTO, LINEAR, 64, steps=60, switch_step=-1))
    assert "switch_step: the first finishing step must be >= 0, got -1" in negative
    plan = plan_schedule(AUTO, LINEAR, 64, steps=60, switch_step=59)
    assert plan.switch_step == 59 and 0 < plan.modeled_savings() < 1


def test_a_schedule_or_a_cost_of_the_wrong_kind_is_refused():
    wrong = one_line_error(lambda: plan_schedule({"kind": "fixed"}, LINEAR, 64, steps=60))
    assert "schedule must be a ScheduleConfig" in wrong
    model = one_line_error(lambda: plan_schedule(FIXED_FIRST, nn.Linear(2, 2), 64, steps=60))
    assert "cost is the model Linear, not its compute model" in model
    assert "cost must be a compute model" in one_line_error(
        lambda: plan_schedule(FIXED_FIRST, 2.0, 64, steps=60)
    )


# -- the depth scheduler ---------------------------------------------------------------------------


def test_the_scheduler_refuses_the_model_where_its_handle_goes():
    """Before: a raw AttributeError ('Linear' object has no attribute 'set_depth')."""
    plan = plan_schedule(FIXED_FIRST, LINEAR, 64, steps=20)
    message = one_line_error(lambda: DepthScheduler(plan, nn.Linear(2, 2)))
    assert "is the model Linear, not a depth handle: wrap it, depth_handle(model)" in message


def test_observe_takes_one_value_per_optimizer_step():
    plan = plan_schedule(AUTO, LINEAR, 64, steps=100)
    scheduler = DepthScheduler(plan)
    scheduler.begin(0)
    scheduler.observe(1, 3.0)
    message = one_line_error(lambda: scheduler.observe(1, 2.9))  # a second micro-batch
    assert "one value per optimizer step" in message and "observe(step=1)" in message


def test_loading_a_state_that_is_not_the_plans_is_one_line():
    auto = DepthScheduler(plan_schedule(AUTO, LINEAR, 64, steps=100))
    assert "got an empty dict" in one_line_error(lambda: auto.load_state_dict({}))  # a KeyError
    assert "keys ['probes']" in one_line_error(lambda: auto.load_state_dict({"probes": 1}))
    fixed = DepthScheduler(plan_schedule(FIXED_FIRST, LINEAR, 64, steps=100))
    fixed.load_state_dict({})  # what its state_dict() is
    state = json.loads(json.dumps(auto.state_dict()))
    assert "has no auto switch" in one_line_error(lambda: fixed.load_state_dict(state))


# -- the measured compute model --------------------------------------------------------------------


class Looped(nn.Module):
    """A block looped `depth` times over the sequence; `grow` adds `depth` learned tokens to the
    sequence first (a model whose depth lengthens its sequence); `draw` makes it draw its own
    depth at each forward, whatever its handle set (a model the handle does not reach)."""

    def __init__(self, grow: bool = False, draw: bool = False) -> None:
        super().__init__()
        self.embed, self.block, self.head = (
            nn.Embedding(16, 32),
            nn.Linear(32, 32),
            nn.Linear(32, 16),
        )
        self.extra = nn.Parameter(torch.zeros(64, 32))
        self.grow, self.draw, self.depth = grow, draw, 1

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        depth = int(torch.randint(1, 9, ())) if self.draw else self.depth
        h = self.embed(tokens)
        if self.grow:
            h = torch.cat([h, self.extra[:depth].expand(h.shape[0], -1, -1)], dim=1)
        for _ in range(depth):
            h = torch.tanh(self.block(h))
        return self.head(h[:, : tokens.shape[1]])


def loss_of(model: nn.Module, tokens: torch.Tensor):
    return lambda: model(tokens).logsumexp(-1).mean()


def handle_of(model: Looped):
    return depth_handle(model, set_depth=lambda k: setattr(model, "depth", k))


def test_a_line_checked_only_shallow_is_checked_at_the_plans_deepest_depth():
    """The sequence grows by the depth: a line through 1..3 holds within 1%, but is far off at
    k_max = 32, which the plan counts before it trusts the line (before: planned on the line)."""
    torch.manual_seed(0)
    model = Looped(grow=True)
    tokens = torch.randint(0, 16, (2, 64))
    cost = measure_flops(model, loss_of(model, tokens), tokens.numel(), handle=handle_of(model))
    deep = ScheduleConfig(kind="fixed-first", k0=2, switch=0.7, k_min=1, k_max=32)
    message = one_line_error(lambda: plan_schedule(deep, cost, tokens.numel(), steps=20))
    assert "training FLOPs are not linear in the depth" in message and "at depth 32" in message
    assert "compute model of your own" in message
    shallow = ScheduleConfig(kind="fixed-first", k0=1, switch=0.7, k_min=1, k_max=3)
    assert plan_schedule(shallow, cost, tokens.numel(), steps=20).total_steps == 20
    checked = one_line_error(
        lambda: measure_flops(model, loss_of(model, tokens), 128, (1, 2, 3), handle_of(model), 32)
    )
    assert "at depth 32" in checked


def test_a_model_that_draws_its_own_depth_is_named_so():
    torch.manual_seed(0)
    model = Looped(draw=True)
    tokens = torch.randint(0, 16, (2, 16))
    message = one_line_error(
        lambda: measure_flops(
            model, loss_of(model, tokens), tokens.numel(), handle=handle_of(model)
        )
    )
    assert "your model draws its own depth; the handle is not reaching it" in message


def test_a_model_whose_handle_changes_nothing_is_named_so():
    model = Looped()
    tokens = torch.randint(0, 16, (2, 16))
    ignored = depth_handle(model, set_depth=lambda k: None)
    message = one_line_error(
        lambda: measure_flops(model, loss_of(model, tokens), 32, handle=ignored)
    )
    assert "the handle is not reaching the model's loop" in message


def test_a_loss_that_is_not_the_loss_is_one_line():
    model = Looped()
    tokens = torch.randint(0, 16, (2, 16))
    logits = one_line_error(
        lambda: measure_flops(model, lambda: model(tokens), 32, handle=handle_of(model))
    )
    assert "a tensor of shape (2, 16, 16)" in logits and "the logits?" in logits

    class Output:
        logits = None

    output = one_line_error(lambda: measure_flops(model, Output, 32, handle=handle_of(model)))
    assert "it returned Output (return model(...).loss)" in output
    handle = one_line_error(lambda: measure_flops(model, loss_of(model, tokens), 32, handle=model))
    assert "is the model Looped, not a depth handle" in handle


# -- a depth that is a forward argument ------------------------------------------------------------


class Recurrent(nn.Module):
    """Huginn's way: the number of recurrences is a forward argument, drawn when not given."""

    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Linear(8, 8)
        self.ran: list[int] = []

    def forward(self, x: torch.Tensor, labels=None, num_steps: int | None = None) -> torch.Tensor:
        if num_steps is None:
            num_steps = int(torch.randint(1, 33, ()))
        self.ran.append(num_steps)
        for _ in range(num_steps):
            x = torch.tanh(self.block(x))
        return x


def test_the_forward_argument_handle_supplies_the_depth_a_call_leaves_out():
    model = Recurrent()
    x = torch.randn(2, 8)
    handle = depth_handle(model, forward_kwarg="num_steps")
    handle.set_depth(3)
    model(x)
    model(x, None, None)  # None asks for the handle's depth
    model(x, num_steps=5)  # a call that gives its own keeps it
    model(x, None, 6)
    newer = depth_handle(model, forward_kwarg="num_steps")
    newer.set_depth(2)
    model(x)  # the newest handle wins
    assert model.ran == [3, 3, 5, 6, 2]
    assert "must be an integer >= 1" in one_line_error(lambda: handle.set_depth(0))
    named = one_line_error(lambda: depth_handle(model, forward_kwarg="n_loops"))
    assert "has no argument 'n_loops'" in named and "num_steps" in named


def test_a_forward_argument_model_is_measured_and_follows_a_plan():
    model = Recurrent()
    x = torch.randn(4, 8)
    handle = depth_handle(model, forward_kwarg="num_steps")
    cost = measure_flops(model, lambda: model(x).square().mean(), 4, handle=handle)
    plan = plan_schedule(FIXED_FIRST, cost, 4, steps=10)
    scheduler = DepthScheduler(plan, handle)
    model.ran.clear()
    for step in range(10):
        scheduler.begin(step)
        model(x)
    assert model.ran == [plan.depth(s) for s in range(10)]
