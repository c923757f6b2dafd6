"""The hoisted input injection computes what the concat form computes.

The model adds W_e e, computed once per forward, to W_s s in every iteration instead of applying
the (d, 2d) adapter to [s; e] (docs/design.md §1). These tests run the concat form written out
from the model's parts and hold every path to it within 1e-6: training and evaluation forwards
with their gradients, truncated backprop, one-pass evaluation at many depths and cached decoding.
The saved weight is still the (d, 2d) matrix, so checkpoints of either form load into the other.
"""

from __future__ import annotations

import pytest
import torch

from fixedfirst.model import KVCache, LoopedTransformer
from tests.conftest import tiny_model_config

TOL = {"atol": 1e-6, "rtol": 1e-6}
CONCAT_VARIANTS = [{}, {"norm": "sandwich"}, {"n_prelude": 0, "tie_embeddings": True}]


def build(**overrides) -> LoopedTransformer:
    torch.manual_seed(0)
    return LoopedTransformer(tiny_model_config(**overrides))


def concat_form_logits(
    model: LoopedTransformer,
    tokens: torch.Tensor,
    depth: int,
    free: int = 0,
    seeds: list[int] | None = None,
) -> torch.Tensor:
    """The recurrence with the adapter applied to torch.cat([state, e]) every iteration (the
    first `free` iterations without gradient), from the model's parts."""
    e = model.embed(tokens)
    for block in model.prelude:
        e = block(e, model.rotary)
    state = model.initial_state(e, 0, not model.training, seeds)

    def iteration(s: torch.Tensor) -> torch.Tensor:
        s = model.adapter(torch.cat([s, e], dim=-1))
        for block in model.core:
            s = block(s, model.rotary)
        return s

    with torch.no_grad():
        for _ in range(free):
            state = iteration(state)
    state = state.detach() if free else state
    for _ in range(depth - free):
        state = iteration(state)
    x = model.core_norm(state)
    for block in model.coda:
        x = block(x, model.rotary)
    return model.head(model.out_norm(x))


@pytest.mark.parametrize("overrides", CONCAT_VARIANTS)
@pytest.mark.parametrize("depth", [1, 4, 16])
def test_evaluation_logits_equal_the_concat_form(overrides, depth):
    model = build(**overrides).eval()
    x = torch.randint(0, 61, (2, 24))
    with torch.no_grad():
        want = concat_form_logits(model, x, depth)
        torch.testing.assert_close(model(x, depth), want, **TOL)
        by_depth = dict(model.logits_by_depth(x, [1, depth]))
    torch.testing.assert_close(by_depth[depth], want, **TOL)


@pytest.mark.parametrize("overrides", CONCAT_VARIANTS)
@pytest.mark.parametrize(("depth", "grad_depth"), [(4, None), (6, 2)])
def test_training_gradients_equal_the_concat_form(overrides, depth, grad_depth):
    model = build(**overrides).train()
    x = torch.randint(0, 61, (3, 20))
    seeds = [5, 6, 7]
    out = model(x, depth, grad_depth=grad_depth, state_seeds=seeds)
    out.square().mean().backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    free = 0 if grad_depth is None else depth - grad_depth
    want = concat_form_logits(model, x, depth, free, seeds)
    torch.testing.assert_close(out, want, **TOL)
    want.square().mean().backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(got[n], p.grad, **TOL, msg=n)
    # Both halves of the adapter learn: the state half and the prelude half.
    d = model.config.d_model
    assert got["adapter.weight"][:, :d].abs().sum() > 0
    assert got["adapter.weight"][:, d:].abs().sum() > 0


def test_cached_decoding_equals_the_concat_form():
    model = build(norm="sandwich").eval()
    x = torch.randint(0, 61, (2, 18))
    cache = KVCache()
    with torch.no_grad():
        parts = [model.decode_step(x[:, :9], 5, cache), model.decode_step(x[:, 9:10], 5, cache)]
        parts.append(model.decode_step(x[:, 10:], 5, cache))
        torch.testing.assert_close(torch.cat(parts, 1), concat_form_logits(model, x, 5), **TOL)


def test_the_saved_adapter_is_the_concat_forms_matrix():
    """A state dict of the concat form (adapter.weight of shape (d, 2d)) loads unchanged, and a
    different adapter changes the logits, so the loaded matrix is the one the model uses."""
    model = build().eval()
    d = model.config.d_model
    state = model.state_dict()
    assert state["adapter.weight"].shape == (d, 2 * d)
    x = torch.randint(0, 61, (1, 12))
    other = build()
    other.load_state_dict(state)
    other.eval()
    with torch.no_grad():
        torch.testing.assert_close(other(x, 3), concat_form_logits(model, x, 3), **TOL)
        other.adapter.weight[:, d:] *= 2  # the prelude half
        assert not torch.allclose(other(x, 3), model(x, 3))
