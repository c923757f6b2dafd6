"""Activation checkpointing (`train.checkpoint_activations`) changes memory, not arithmetic.

Each core iteration is recomputed from its saved input state in the backward; the recomputation
is the same computation on the same inputs, so gradients equal those of plain backprop, with and
without truncated backprop, and the trainer takes the same steps either way.
"""

from __future__ import annotations

import pytest
import torch

from fixedfirst.model import LoopedTransformer
from fixedfirst.train.trainer import Trainer
from tests.conftest import tiny_model_config
from tests.trainer_helpers import final_weights, tiny_config, train_records


def gradients(model: LoopedTransformer, checkpoint: bool, depth: int, grad_depth: int | None):
    model.zero_grad()
    x = torch.randint(0, 61, (3, 20), generator=torch.Generator().manual_seed(4))
    out = model(x, depth, grad_depth=grad_depth, state_seeds=[1, 2, 3], checkpoint=checkpoint)
    out.square().mean().backward()
    return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("overrides", [{}, {"norm": "sandwich", "injection": "add"}])
@pytest.mark.parametrize(("depth", "grad_depth"), [(1, None), (6, None), (6, 2)])
def test_checkpointed_and_plain_backprop_give_the_same_gradients(overrides, depth, grad_depth):
    torch.manual_seed(0)
    model = LoopedTransformer(tiny_model_config(**overrides)).train()
    plain_out, plain = gradients(model, False, depth, grad_depth)
    ckpt_out, ckpt = gradients(model, True, depth, grad_depth)
    torch.testing.assert_close(ckpt_out, plain_out, rtol=0, atol=0)
    for name in plain:
        torch.testing.assert_close(ckpt[name], plain[name], rtol=1e-6, atol=1e-7, msg=name)


def test_checkpointing_recomputes_each_iteration_in_the_backward():
    """The iterations really are recomputed: the backward of a depth-5 forward runs the core's
    first layer 5 more times with checkpointing, none without."""
    torch.manual_seed(0)
    model = LoopedTransformer(tiny_model_config()).train()
    calls = []
    model.core[0].register_forward_hook(lambda *_: calls.append(torch.is_grad_enabled()))
    x = torch.randint(0, 61, (2, 10))
    for checkpoint, extra in ((False, 0), (True, 5)):
        calls.clear()
        out = model(x, 5, checkpoint=checkpoint)
        assert len(calls) == 5
        out.sum().backward()
        assert len(calls) == 5 + extra


def test_training_with_checkpointing_takes_the_same_steps(tmp_path, tiny_run):
    config = tiny_config("train.checkpoint_activations=true")
    Trainer(config, tmp_path / "ckpt", quiet=True).train()
    plain, ckpt = train_records(tiny_run.path), train_records(tmp_path / "ckpt")
    assert [r["loss"] for r in ckpt] == pytest.approx([r["loss"] for r in plain], rel=1e-5)
    a, b = final_weights(tiny_run.path), final_weights(tmp_path / "ckpt")
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-5, atol=1e-6, msg=name)
