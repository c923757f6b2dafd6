"""Properties over random valid configurations (hypothesis): whatever a user may legally write,
the model builds and gives finite logits at any depth (one-pass evaluation giving what a forward
gives), every schedule stays within its bounds, and the compute model is positive and grows with
depth."""

from __future__ import annotations

import itertools
import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fixedfirst.compute.flops import flop_model
from fixedfirst.config import ModelConfig, ScheduleConfig
from fixedfirst.model import LoopedTransformer
from fixedfirst.schedules import Schedule

FAST = settings(max_examples=25, deadline=None)


@st.composite
def model_configs(draw) -> ModelConfig:
    n_heads = draw(st.integers(1, 4))
    head_dim = 2 * draw(st.integers(1, 4))  # rotary needs an even head size
    return ModelConfig(
        vocab_size=draw(st.integers(2, 80)),
        d_model=n_heads * head_dim,
        n_heads=n_heads,
        n_prelude=draw(st.integers(0, 2)),
        n_core=draw(st.integers(1, 2)),
        n_coda=draw(st.integers(0, 2)),
        max_seq_len=draw(st.integers(4, 24)),
        d_ff=draw(st.none() | st.integers(1, 48)),
        mlp=draw(st.sampled_from(["swiglu", "gelu"])),
        norm=draw(st.sampled_from(["pre", "sandwich"])),
        injection=draw(st.sampled_from(["concat", "add"])),
        state_init=draw(st.sampled_from(["normal", "zeros"])),
        eval_seed=draw(st.integers(0, 2**31)),
        tie_embeddings=draw(st.booleans()),
        rope_base=draw(st.floats(2.0, 1e6)),
    )


@st.composite
def schedule_configs(draw) -> ScheduleConfig:
    k_min = draw(st.integers(1, 8))
    k_max = draw(st.integers(k_min, 24))
    kind = draw(
        st.sampled_from(["fixed", "uniform", "poisson-lognormal", "progressive", "fixed-first"])
    )
    finish = draw(st.sampled_from(["uniform", "poisson-lognormal"]))
    uses_pln = kind in ("poisson-lognormal", "progressive") or finish == "poisson-lognormal"
    # The Poisson-lognormal mean is the mean after the clip at k_max: 1, or below k_max.
    below_max = st.floats(1.0, float(k_max), exclude_max=True, allow_subnormal=False)
    mean = draw(st.none() | st.just(1.0) | (below_max if k_max > 1 else st.just(1.0)))
    if uses_pln and mean is None and k_min == k_max:
        mean = 1.0  # the default (k_min + k_max) / 2 = k_max is out of reach
    return ScheduleConfig(
        kind=kind,
        depth=draw(st.integers(1, 64)),
        k0=draw(st.integers(1, k_max)),
        switch=draw(st.floats(0.0, 1.0)),
        finish=finish,
        k_min=k_min,
        k_max=k_max,
        mean=mean,
        sigma=draw(st.floats(0.05, 2.0)),
        warmup=draw(st.floats(0.01, 1.0)),
        ramp=draw(st.sampled_from(["linear", "sqrt"])),
    )


@FAST
@given(config=model_configs(), data=st.data())
def test_model_builds_and_is_finite_at_random_depths(config, data):
    torch.manual_seed(0)
    model = LoopedTransformer(config)
    batch = data.draw(st.integers(1, 3))
    length = data.draw(st.integers(1, config.max_seq_len))
    tokens = torch.randint(0, config.vocab_size, (batch, length))
    for depth in data.draw(st.lists(st.integers(1, 12), min_size=1, max_size=3)):
        model.train()
        grad_depth = data.draw(st.none() | st.integers(1, 4))
        logits = model(tokens, depth, grad_depth, state_seeds=list(range(batch)))
        assert logits.shape == (batch, length, config.vocab_size)
        assert torch.isfinite(logits).all()
        model.eval()
        with torch.no_grad():
            served = model(tokens, depth)
            assert torch.isfinite(served).all()
            # one pass to the deepest of several depths reads out what each forward computes
            by_depth = dict(model.logits_by_depth(tokens, [1, depth, depth + 2]))
        torch.testing.assert_close(by_depth[depth], served, rtol=1e-4, atol=1e-5)


@FAST
@given(config=schedule_configs(), total_steps=st.integers(1, 300), seed=st.integers(0, 2**31))
def test_schedule_stays_within_its_bounds(config, total_steps, seed):
    schedule = Schedule(config, seed)
    depths = schedule.depths(total_steps)
    assert len(depths) == total_steps
    if config.kind == "fixed":
        assert set(depths) == {config.depth}
        return
    assert all(1 <= k <= config.k_max for k in depths)
    if config.kind == "uniform":
        assert all(config.k_min <= k for k in depths)
    if config.kind == "fixed-first":
        switch = schedule.switch_step(total_steps)
        assert 0 <= switch <= total_steps
        assert switch >= math.ceil(config.switch * total_steps) - 1
        assert set(depths[:switch]) <= {config.k0}
        if config.finish == "uniform":
            assert all(config.k_min <= k for k in depths[switch:])
    stages = schedule.stages(total_steps)
    assert sum(s.steps for s in stages) == total_steps
    assert all(1 <= s.dist.mean <= config.k_max for s in stages)


@FAST
@given(
    config=model_configs(),
    seq_len=st.integers(1, 64),
    grad_depth=st.none() | st.integers(1, 8),
)
def test_compute_model_is_positive_and_grows_with_depth(config, seq_len, grad_depth):
    fm = flop_model(config, seq_len)
    forward = [fm.forward(k) for k in range(1, 33)]
    train = [fm.train(k, grad_depth) for k in range(1, 33)]
    assert all(f > 0 for f in forward) and all(t > 0 for t in train)
    assert all(a < b for a, b in itertools.pairwise(forward))
    assert all(a < b for a, b in itertools.pairwise(train))
    assert all(t >= f for t, f in zip(train, forward, strict=True))  # backward is never free
    assert fm.eval_all_depths(list(range(1, 9))) > fm.forward(8)
