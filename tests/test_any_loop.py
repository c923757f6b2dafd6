"""Fixed-first on looped models we did not write, in loops we did not write: depth handles, the
measured compute model, the depth scheduler in a plain loop and the Hugging Face Trainer
callback, on transformers' Inkling2LoopForCausalLM (tests/inkling_helpers.py), checked against
the passes each forward actually ran and against torch's own FLOP counter."""

from __future__ import annotations

import importlib
import json
import math
import sys

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from fixedfirst.compute.flops import FlopModel, flop_model
from fixedfirst.compute.measured import COUNTED_TOO, measure_flops
from fixedfirst.compute.plan import plan_schedule
from fixedfirst.config import ScheduleConfig, SwitchConfig
from fixedfirst.errors import UserError
from fixedfirst.model import LoopedTransformer
from fixedfirst.model.handles import depth_handle
from fixedfirst.scheduling.depth_scheduler import DepthScheduler
from tests.conftest import tiny_model_config
from tests.inkling_helpers import PassCounter, batches, needs_inkling, tiny_inkling

FINISH_TO_4 = ScheduleConfig(kind="fixed-first", k0=1, switch=0.6, k_min=1, k_max=4)
AUTO = ScheduleConfig(kind="fixed-first", k0=1, switch="auto", k_min=1, k_max=4)
LINEAR = FlopModel(prelude=10.0, iteration=5.0, readout=20.0)


def one_line_error(call) -> str:
    with pytest.raises(UserError) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message
    return message


# -- handles -------------------------------------------------------------------------------------


@needs_inkling
def test_the_inkling_handle_sets_the_passes_each_forward_runs():
    model = tiny_inkling()
    counter = PassCounter().attach(model)
    handle = depth_handle(model)
    x = batches(2, 9, 0)
    for depth in (1, 3, 2, 6):
        handle.set_depth(depth)
        model(input_ids=x)
    assert counter.passes == [1, 3, 2, 6]


def test_the_looped_transformer_handle_supplies_the_depth_a_call_leaves_out():
    torch.manual_seed(0)
    model = LoopedTransformer(tiny_model_config()).eval()
    tokens = torch.randint(0, 61, (2, 12))
    handle = depth_handle(model)
    handle.set_depth(3)
    with torch.no_grad():
        assert torch.equal(model(tokens), model(tokens, 3))
        assert not torch.equal(model(tokens), model(tokens, 2))
        assert torch.equal(model(tokens, depth=5), model(tokens, 5))  # a call's own depth wins
    handle.remove()
    with pytest.raises(TypeError):
        model(tokens)


def test_measuring_leaves_no_handle_behind_and_the_newest_handle_sets_the_depth():
    """measure_flops's own handle of our model is a forward hook: left on the model at the last
    depth measured, it supplied that depth to every later forward and a scheduler's handle set
    nothing (a README loop trained every step at depth 3)."""
    torch.manual_seed(0)
    model = LoopedTransformer(tiny_model_config()).eval()
    tokens = torch.randint(0, 61, (2, 12))
    measure_flops(model, lambda: model(tokens).float().pow(2).mean(), tokens=tokens.numel())
    with pytest.raises(TypeError):  # no depth supplied by a forgotten handle
        model(tokens)
    older, newer = depth_handle(model), depth_handle(model)
    older.set_depth(3)
    newer.set_depth(2)
    with torch.no_grad():
        assert torch.equal(model(tokens), model(tokens, 2))


def test_our_hugging_face_export_takes_its_depth_from_the_handle():
    pytest.importorskip("transformers")
    from fixedfirst.export.hf.modeling_fixedfirst import FixedFirstConfig, FixedFirstForCausalLM

    torch.manual_seed(0)
    model = FixedFirstForCausalLM(FixedFirstConfig(vocab_size=50, hidden_size=32)).eval()
    x = torch.randint(0, 50, (1, 10))
    handle = depth_handle(model)
    with torch.no_grad():
        for depth in (1, 4):
            handle.set_depth(depth)
            assert torch.equal(model(x).logits, model(x, depth=depth).logits)


def test_any_other_model_plugs_in_with_one_function():
    class Looped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block, self.n_loops = torch.nn.Linear(4, 4), 1

        def forward(self, x):
            for _ in range(self.n_loops):
                x = self.block(x)
            return x

    model = Looped()
    message = one_line_error(lambda: depth_handle(model))
    assert "no depth handle for Looped" in message and "set_depth=" in message
    handle = depth_handle(model, set_depth=lambda k: setattr(model, "n_loops", k))
    plan = plan_schedule(FINISH_TO_4, flop_model(tiny_model_config(), 8), 8, steps=20)
    scheduler = DepthScheduler(plan, handle)
    for step in range(20):
        scheduler.begin(step)
        assert model.n_loops == plan.depth(step)


@needs_inkling
def test_a_depth_a_model_cannot_run_is_refused_in_one_line():
    inkling = depth_handle(tiny_inkling())
    assert "cannot run depth 0" in one_line_error(lambda: inkling.set_depth(0))
    assert "cannot run depth 2000" in one_line_error(lambda: inkling.set_depth(2000))
    ours = depth_handle(LoopedTransformer(tiny_model_config()))
    assert "depth must be an integer >= 1" in one_line_error(lambda: ours.set_depth(0))


def test_a_plan_deeper_than_the_model_runs_is_refused_before_its_first_step():
    def at_most_three(depth):
        if depth > 3:
            raise UserError(f"this model runs at most 3 passes, not {depth}")

    plan = plan_schedule(FINISH_TO_4, flop_model(tiny_model_config(), 8), 8, steps=10)
    handle = depth_handle(torch.nn.Linear(2, 2), set_depth=at_most_three)
    assert "not 4" in one_line_error(lambda: DepthScheduler(plan, handle))
    assert plan.at(0).depth == 1  # the first step alone would not have told


@needs_inkling
def test_a_transformers_without_the_architecture_is_named_in_one_line(monkeypatch):
    model = tiny_inkling()
    real = importlib.import_module

    def without_inkling(name, *args):
        if name.startswith("transformers.models.inkling2_loop"):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", without_inkling)
    message = one_line_error(lambda: depth_handle(model))
    assert (
        "has no Inkling2LoopForCausalLM (it came in 5.24.0)" in message
        and "fixedfirst[looped]" in message
    )
    monkeypatch.setitem(sys.modules, "transformers", None)
    assert "transformers is not installed" in one_line_error(lambda: depth_handle(model))


# -- the depth scheduler ------------------------------------------------------------------------


def test_a_schedulers_state_continues_a_loop_exactly():
    """The plain loop's resume: a scheduler rebuilt from `state_dict` just before the floor
    decides what the uninterrupted one decides, at the floor (observations here synthetic: a
    loss flat by then); one restarted there without it would lack the window's losses and switch
    later (past the switch: a second time), so its first step is refused in one line. A restart
    before the window the first check reads loses nothing and is let through."""
    switch = SwitchConfig(rule="plateau", floor=0.3, ceiling=0.9, window=0.2, every=5)
    plan = plan_schedule(AUTO, LINEAR, 64, steps=200, switch=switch)

    def loss(step: int) -> float:
        return 3.0 + 50.0 * math.exp(-step / 2)

    def run(scheduler: DepthScheduler, start: int, stop: int) -> list[int]:
        depths = []
        for step in range(start, stop):
            depths.append(scheduler.begin(step).depth)
            scheduler.observe(step + 1, loss(step))
        return depths

    straight = DepthScheduler(plan)
    depths = run(straight, 0, 200)
    first = DepthScheduler(plan)
    head = run(first, 0, 57)
    state = json.loads(json.dumps(first.state_dict()))
    second = DepthScheduler(plan)
    second.load_state_dict(state)
    assert head + run(second, 57, 200) == depths
    assert second.switch_step == straight.switch_step is not None
    assert straight.switch_step == 60
    for restart in (57, 150):  # before the switch at 60, and after it
        message = one_line_error(lambda: run(DepthScheduler(plan), restart, 200))  # noqa: B023
        assert f"starts at step {restart}" in message and "load_state_dict" in message
    early = DepthScheduler(plan)  # the first check (at 60) reads the window after step 20
    assert run(early, 20, 200) == depths[20:]
    decided = DepthScheduler(plan)  # decide() first, as fixedfirst's trainer does at a boundary
    assert "load_state_dict" in one_line_error(lambda: decided.decide(100))


def test_the_rule_is_asked_once_a_boundary_and_the_probes_are_counted_in_the_state():
    """fixedfirst's trainer asks the rule at a boundary (`decide`) before its checkpoint there,
    then begins the step: the rule is asked once. A scheduler resumed from the state saved after
    `decide` asks again and answers the same; the state counts the probes (depth-gap's gains)."""
    switch = SwitchConfig(rule="depth-gap", floor=0.3, ceiling=0.9, window=0.2, every=5)
    plan = plan_schedule(AUTO, LINEAR, 64, steps=200, switch=switch)
    scheduler = DepthScheduler(plan)
    probed = [s for s in range(61) if scheduler.probe_due(s)]
    assert probed == list(range(20, 61, 5))  # from one window (40 steps) before the floor (60)
    for s in probed:
        scheduler.observe(s, 1.0 - s / 20)  # still falling fast: the check at the floor holds
    assert scheduler.decides_at(60) and not scheduler.decides_at(59)
    check, decision = scheduler.decide(60)
    assert check is not None and not check.fires and decision is None
    assert not scheduler.decides_at(60) and scheduler.decide(60) == (None, None)
    assert scheduler.begin(60).phase == "fixed"
    state = json.loads(json.dumps(scheduler.state_dict()))
    assert state["probes"] == len(probed) == 9
    resumed = DepthScheduler(plan)
    resumed.load_state_dict(state)
    assert resumed.probes == 9 and resumed.decide(60) == (check, None)
    resumed.observe(65, -8.0)
    assert resumed.probes == 10
    earlier = DepthScheduler(plan)  # a state saved before probes were counted counts none
    earlier.load_state_dict({"switch": state["switch"]})
    assert earlier.probes == 0 and earlier.decide(60) == (check, None)


# -- the measured compute model ------------------------------------------------------------------


def counted_step(model, loss, set_depth, depth) -> int:
    """Training FLOPs torch counts for one forward and backward at `depth` (independently of the
    code under test: its own counter, its own depth setting, and a mixture's experts computed
    one by one, as plain matmuls torch's counter sees)."""
    set_depth(depth)
    experts = getattr(model.config, "_experts_implementation", None)
    if experts is not None:
        model.set_experts_implementation("eager")
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        loss().backward()
    if experts is not None:
        model.set_experts_implementation(experts)
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


@needs_inkling
def test_the_measured_model_predicts_depths_it_was_not_fitted_on_within_one_percent():
    model = tiny_inkling()
    x = batches(4, 17, 1)

    def loss():
        return model(input_ids=x, labels=x).loss

    cost = measure_flops(model, loss, tokens=x.numel(), depths=(1, 2))
    assert [k for k, _, _ in cost.measured] == [1, 2]

    def set_passes(k):
        model.config.loop_num_passes = k

    for depth in (3, 5, 9):
        counted = counted_step(model, loss, set_passes, depth) / x.numel()
        assert cost.train(depth) == pytest.approx(counted, rel=0.01)
    assert cost.forward(3) < cost.train(3) / 2  # the backward is the larger part
    assert all(p.grad is None for p in model.parameters())  # measuring leaves no gradients


def test_measured_flops_of_our_model_equal_its_formula():
    """Our own model's FLOPs are known exactly (compute/flops.py, checked against the counter in
    tests/test_compute.py): measuring it must give the same per-token numbers."""
    config = tiny_model_config(vocab_size=300, d_model=64, max_seq_len=128)
    torch.manual_seed(0)
    model = LoopedTransformer(config)
    tokens = torch.randint(0, 300, (2, 96))
    cost = measure_flops(model, lambda: model(tokens).float().pow(2).mean(), tokens=tokens.numel())
    formula = flop_model(config, 96)
    for depth in (1, 4, 11):
        assert cost.train(depth) == pytest.approx(formula.train(depth), rel=1e-9)
        assert cost.forward(depth) == pytest.approx(formula.forward(depth), rel=1e-9)


def test_a_model_whose_flops_are_not_linear_in_depth_is_refused():
    class Quadratic(torch.nn.Module):  # depth k runs k * k blocks
        def __init__(self) -> None:
            super().__init__()
            self.block, self.k = torch.nn.Linear(8, 8), 1

        def forward(self, x):
            for _ in range(self.k * self.k):
                x = self.block(x)
            return x.sum()

    model = Quadratic()
    x = torch.randn(4, 8)
    handle = depth_handle(model, set_depth=lambda k: setattr(model, "k", k))
    message = one_line_error(lambda: measure_flops(model, lambda: model(x), 4, (1, 2, 3), handle))
    assert "not linear in the depth" in message


# -- compute-matched arms ------------------------------------------------------------------------


class LoopedMLP(torch.nn.Module):
    """A looped model nobody here wrote: an embedding, a residual MLP block applied `passes`
    times, a head. Cheap enough to count every FLOP of a few hundred steps."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.head = torch.nn.Embedding(64, 32), torch.nn.Linear(32, 64)
        self.block = torch.nn.Sequential(
            torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32)
        )
        self.passes = 1

    def forward(self, tokens):
        h = self.embed(tokens[:, :-1])
        for _ in range(self.passes):
            h = h + self.block(h)
        logits = self.head(h)
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())


ARMS = [
    FINISH_TO_4,
    ScheduleConfig(kind="uniform", k_min=1, k_max=4),
    ScheduleConfig(kind="fixed", depth=2),
]


def test_compute_matched_arms_end_within_one_percent_of_their_budget():
    """Three arms planned to one FLOP budget on a measured foreign model, trained, every FLOP of
    each run counted by torch: each ends within 1% of the budget (and below it)."""
    torch.manual_seed(0)
    model = LoopedMLP()
    handle = depth_handle(model, set_depth=lambda k: setattr(model, "passes", k))
    x = batches(4, 9, 2)
    cost = measure_flops(model, lambda: model(x), tokens=x.numel(), handle=handle)
    budget = 110 * x.numel() * cost.train(4)  # more than 100 steps in every arm
    for schedule in ARMS:
        plan = plan_schedule(schedule, cost, x.numel(), flops=budget, seed=1)
        scheduler = DepthScheduler(plan, handle)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
        with FlopCounterMode(display=False) as counter:
            for step in range(plan.total_steps):
                scheduler.begin(step)
                model(batches(4, 9, step)).backward()
                optimizer.step()
                optimizer.zero_grad()
        spent = counter.get_total_flops()
        assert 0.99 * budget <= spent <= budget, (schedule.kind, plan.total_steps, spent)


@needs_inkling
def test_the_plan_counts_the_flops_an_inkling_run_spends():
    """On the mixture-of-experts model, two arms compute-matched to one budget, trained: the
    FLOPs of the passes each forward actually ran (each depth's step counted by torch, apart
    from the measured model) are the plan's within 1%, and end within one step of the budget."""
    model = tiny_inkling()
    counter = PassCounter().attach(model)
    x = batches(2, 9, 2)

    def loss():
        return model(input_ids=x, labels=x).loss

    cost = measure_flops(model, loss, tokens=x.numel())
    counter.passes.clear()

    def set_passes(k):
        model.config.loop_num_passes = k

    per_depth = {k: counted_step(model, loss, set_passes, k) for k in range(1, 5)}
    counter.passes.clear()
    budget = 24 * x.numel() * cost.train(2)
    for schedule in ARMS[:2]:
        plan = plan_schedule(schedule, cost, x.numel(), flops=budget, seed=4)
        counter.passes.clear()  # the plan's check of the line at its deepest depth, 4
        scheduler = DepthScheduler(plan, depth_handle(model))
        for step in range(plan.total_steps):
            scheduler.begin(step)
            tokens = batches(2, 9, step)
            model(input_ids=tokens, labels=tokens).loss.backward()
            model.zero_grad()
        assert counter.passes == [plan.depth(s) for s in range(plan.total_steps)]
        spent = sum(per_depth[k] for k in counter.passes)
        counter.passes.clear()
        assert spent == pytest.approx(plan.flops, rel=0.01)
        assert budget - per_depth[4] < spent < budget + 0.01 * budget


def test_only_the_trainer_callback_needs_transformers():
    """In a process where transformers cannot be imported: the plan, the handles, the measured
    compute model and the scheduler work; the callback is refused in one line."""
    import subprocess

    code = (
        "import sys\n"
        "sys.modules['transformers'] = None  # any import of it fails\n"
        "import fixedfirst\n"
        "from fixedfirst import DepthScheduler, ScheduleConfig, depth_handle, plan_schedule\n"
        "from fixedfirst.compute.flops import FlopModel\n"
        "import fixedfirst.compute.measured\n"
        "config = ScheduleConfig(kind='fixed-first', k0=1, switch=0.5, k_max=4)\n"
        "plan = plan_schedule(config, FlopModel(1.0, 1.0, 1.0), 8, steps=10)\n"
        "assert [DepthScheduler(plan).begin(s).depth for s in range(5)] == [1] * 5\n"
        "try:\n"
        "    fixedfirst.FixedFirstCallback\n"
        "except fixedfirst.UserError as e:\n"
        "    print(e)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "FixedFirstCallback needs transformers' Trainer: pip install 'fixedfirst[looped]'"
    )


@needs_inkling
def test_measured_flops_count_the_experts_as_one_by_one_matmuls_would():
    """torch's counter has no formula for torch._grouped_mm (transformers' default for a
    mixture's experts) and counts it as nothing; measure_flops counts it with ours. Reference:
    the same model with its experts computed one by one ("eager"), which the counter sees as
    plain matmuls: the two counts agree exactly, at every measured depth."""
    x = batches(2, 16, 7)
    counts = {}
    for experts in ("grouped_mm", "eager"):
        model = tiny_inkling()
        model.set_experts_implementation(experts)
        cost = measure_flops(model, lambda m=model: m(input_ids=x, labels=x).loss, x.numel())
        counts[experts] = [(cost.train(k), cost.forward(k)) for k in (1, 2, 3)]
    assert counts["grouped_mm"] == counts["eager"]


def _counted(run) -> tuple[torch.Tensor, int]:
    with FlopCounterMode(display=False, custom_mapping=COUNTED_TOO) as counter:
        out = run()
    return out, counter.get_total_flops()


def _mm_by_group(a, b, ends, along):
    """torch._grouped_mm's result computed group by group with torch.mm (`ends`: each group's
    end along `along`, "rows" of a, the contraction "inner", "cols" of b, or None: batched)."""
    spans = [] if ends is None else list(enumerate(zip([0, *ends[:-1]], ends, strict=True)))
    if along == "rows":  # a (M, K), b (G, K, N): rows of a in group g meet b[g]
        return torch.cat([a[s:e] @ b[g] for g, (s, e) in spans])
    if along == "inner":  # a (K, M), b (M, N): the contraction split, one (K, N) per group
        return torch.stack([a[:, s:e] @ b[s:e] for _, (s, e) in spans])
    if along == "cols":  # a (G, M, K), b (K, N): columns of b in group g meet a[g]
        return torch.cat([a[g] @ b[:, s:e] for g, (s, e) in spans], 1)
    return torch.stack([a[g] @ b[g] for g in range(a.shape[0])])


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "ends", "along"),
    [
        ((24, 16), (3, 16, 16), [8, 16, 24], "rows"),
        ((16, 24), (24, 16), [8, 16, 24], "inner"),
        ((3, 24, 16), (16, 16), [8, 8, 16], "cols"),
        ((3, 24, 16), (3, 16, 16), None, None),
    ],
)
def test_grouped_matmul_flops_equal_its_matmuls_group_by_group(a_shape, b_shape, ends, along):
    """Each 2-D/3-D case of torch._grouped_mm counts what the same product computed group by
    group with torch.mm counts under torch's own formula (the outputs agree, so the groups are
    read as torch reads them; an empty group, [8, 8, 16], counts nothing)."""
    torch.manual_seed(0)
    a, b = torch.randn(a_shape), torch.randn(b_shape)
    offs = None if ends is None else torch.tensor(ends, dtype=torch.int32)
    grouped, counted = _counted(lambda: torch._grouped_mm(a, b, offs=offs))
    reference, expected = _counted(lambda: _mm_by_group(a, b, ends, along))
    torch.testing.assert_close(grouped, reference)
    assert counted == expected > 0
