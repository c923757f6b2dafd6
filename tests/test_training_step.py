"""The one training step against references written out here: the gradient of the mean loss over
the global batch's scored tokens (whatever the micro-batching), clipping, the learning rate, and
AdamW's update with weight decay on matrices only."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from fixedfirst.config import TrainConfig
from fixedfirst.data.source import Batch
from fixedfirst.model import LoopedTransformer
from fixedfirst.model.layers import RMSNorm
from fixedfirst.model.loss import IGNORE_INDEX
from fixedfirst.train.optim import build_optimizer
from fixedfirst.train.parallel import ParallelModel
from fixedfirst.train.step import StepContext, state_seeds, train_step
from tests.conftest import tiny_model_config

ROWS, LENGTH, DEPTH = 8, 12, 3


class RecordingOptimizer(torch.optim.Optimizer):
    """Records the gradients and learning rate it is asked to step with; changes nothing."""

    def __init__(self, params) -> None:
        super().__init__(params, {"lr": 1.0})
        self.grads: list[dict[int, torch.Tensor]] = []
        self.lrs: list[float] = []

    def step(self, closure=None):
        self.lrs.append(self.param_groups[0]["lr"])
        self.grads.append(
            {
                id(p): p.grad.clone()
                for g in self.param_groups
                for p in g["params"]
                if p.grad is not None
            }
        )


def model_and_batch() -> tuple[LoopedTransformer, Batch]:
    torch.manual_seed(0)
    model = LoopedTransformer(tiny_model_config()).train()
    inputs = torch.randint(0, 61, (ROWS, LENGTH))
    targets = torch.randint(0, 61, (ROWS, LENGTH))
    for row in range(ROWS):  # rows score 12, 11, ..., 5 tokens: unequal on purpose
        targets[row, :row] = IGNORE_INDEX
    return model, Batch(inputs, targets)


def alone(model, optimizer, train: TrainConfig) -> StepContext:
    return StepContext(ParallelModel.alone(model), optimizer, train)


def reference_gradients(model, batch, seeds) -> tuple[float, dict[int, torch.Tensor]]:
    """The whole batch in one forward; cross-entropy averaged over every scored token."""
    model.zero_grad()
    logits = model(batch.inputs, DEPTH, None, seeds)
    loss = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), ignore_index=-100)
    loss.backward()
    grads = {id(p): p.grad.clone() for p in model.parameters()}
    model.zero_grad()
    return loss.item(), grads


@pytest.mark.parametrize("micro", [8, 4, 2, 1])
def test_gradient_is_the_token_mean_over_the_global_batch_whatever_the_micro_batches(micro):
    model, batch = model_and_batch()
    seeds = state_seeds(0, 5, range(ROWS))
    want_loss, want = reference_gradients(model, batch, seeds)
    optimizer = RecordingOptimizer(model.parameters())
    train = TrainConfig(batch_size=ROWS, micro_batch_size=micro, grad_clip=0)
    loss, norm = train_step(alone(model, optimizer, train), batch, DEPTH, 0.5, seeds)
    assert loss.item() == pytest.approx(want_loss, rel=1e-5)
    got = optimizer.grads[0]
    for p in model.parameters():
        torch.testing.assert_close(got[id(p)], want[id(p)], rtol=1e-4, atol=1e-7)
    total = torch.linalg.vector_norm(torch.stack([g.norm() for g in want.values()]))
    assert norm.item() == pytest.approx(total.item(), rel=1e-5)


def test_clipping_scales_the_gradient_to_the_clip_norm_and_reports_the_norm_before():
    model, batch = model_and_batch()
    seeds = state_seeds(0, 0, range(ROWS))
    _, want = reference_gradients(model, batch, seeds)
    before = torch.linalg.vector_norm(torch.stack([g.norm() for g in want.values()])).item()
    clip = before / 4
    optimizer = RecordingOptimizer(model.parameters())
    train = TrainConfig(batch_size=ROWS, micro_batch_size=4, grad_clip=clip)
    _, norm = train_step(alone(model, optimizer, train), batch, DEPTH, 0.5, seeds)
    assert norm.item() == pytest.approx(before, rel=1e-5)
    got = optimizer.grads[0]
    after = torch.linalg.vector_norm(torch.stack([g.norm() for g in got.values()])).item()
    assert after == pytest.approx(clip, rel=1e-5)
    for p in model.parameters():  # the same direction, a quarter of the length
        torch.testing.assert_close(got[id(p)], want[id(p)] / 4, rtol=1e-4, atol=1e-8)


def test_the_step_uses_the_learning_rate_it_is_given():
    model, batch = model_and_batch()
    optimizer = RecordingOptimizer(model.parameters())
    train = TrainConfig(batch_size=ROWS, lr=0.9)
    for lr in (0.25, 1e-3):
        train_step(alone(model, optimizer, train), batch, 1, lr, state_seeds(0, 0, range(ROWS)))
    assert optimizer.lrs == [0.25, 1e-3]


def test_a_batch_that_scores_nothing_is_a_zero_loss_and_no_gradient():
    model, batch = model_and_batch()
    batch = Batch(batch.inputs, torch.full_like(batch.targets, IGNORE_INDEX))
    optimizer = RecordingOptimizer(model.parameters())
    train = TrainConfig(batch_size=ROWS, micro_batch_size=4)
    loss, norm = train_step(alone(model, optimizer, train), batch, 2, 0.1, [1] * ROWS)
    assert loss.item() == 0.0 and norm.item() == 0.0


def test_initial_state_seeds_differ_between_steps_rows_and_runs():
    seeds = [state_seeds(seed, step, range(4)) for seed in (0, 1) for step in (0, 1, 2)]
    flat = [s for group in seeds for s in group]
    assert len(set(flat)) == len(flat)
    # A row's seed is that of its row in the global batch, wherever it is computed.
    assert state_seeds(3, 7, range(4, 8)) == state_seeds(3, 7, range(8))[4:]


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 4, bias=False)
        self.norm = RMSNorm(4)


def test_adamw_matches_a_written_out_adamw_with_decay_on_matrices_only():
    """Three steps of build_optimizer's AdamW against the update rule written out: bias-
    corrected moments with (beta1, beta2), decoupled weight decay on the matrix, none on the
    norm gain."""
    torch.manual_seed(0)
    module = Tiny()
    config = TrainConfig(lr=0.1, weight_decay=0.5, beta1=0.8, beta2=0.9)
    optimizer = build_optimizer(module, config)
    params = {"linear": module.linear.weight, "norm": module.norm.weight}
    expected = {k: p.detach().clone().double() for k, p in params.items()}
    m = {k: torch.zeros_like(v) for k, v in expected.items()}
    v = {k: torch.zeros_like(x) for k, x in expected.items()}
    generator = torch.Generator().manual_seed(1)
    for t in range(1, 4):
        for name, p in params.items():
            p.grad = torch.randn(p.shape, generator=generator) * (10.0 if t == 2 else 1.0)
            g = p.grad.double()
            m[name] = 0.8 * m[name] + 0.2 * g
            v[name] = 0.9 * v[name] + 0.1 * g * g
            m_hat, v_hat = m[name] / (1 - 0.8**t), v[name] / (1 - 0.9**t)
            decay = 0.5 if name == "linear" else 0.0
            expected[name] = expected[name] * (1 - 0.1 * decay)
            expected[name] -= 0.1 * m_hat / (v_hat.sqrt() + 1e-8)
        optimizer.step()
        for name, p in params.items():
            torch.testing.assert_close(p.detach().double(), expected[name], rtol=1e-5, atol=1e-6)
    assert not math.isclose(module.norm.weight[0].item(), 1.0)  # the gain moved, undecayed


def test_the_micro_batch_is_the_configured_one_or_each_processes_share():
    assert TrainConfig(batch_size=16).micro_batch() == 16
    assert TrainConfig(batch_size=16).micro_batch(4) == 4
    assert TrainConfig(batch_size=16, micro_batch_size=2).micro_batch(4) == 2


def test_a_batch_that_does_not_split_into_micro_batches_is_refused():
    model, batch = model_and_batch()
    short = Batch(batch.inputs[:6], batch.targets[:6])
    optimizer = build_optimizer(model, TrainConfig(batch_size=ROWS))
    train = TrainConfig(batch_size=ROWS, micro_batch_size=4)
    with pytest.raises(ValueError, match="6 rows does not split into micro-batches of 4"):
        train_step(alone(model, optimizer, train), short, 1, 0.1, [1] * 6)
