"""No host sync in a training step or the trainer's batch path (docs/design.md §10).

`HostSyncCounter` (train/host_syncs.py) counts, as they are dispatched, the operations after
which a GPU's host waits for the device; on the CPU nothing waits, but the operations are the
same, so the count is what a CUDA step would wait for. The trainer's step on CUDA uses the fused
AdamW (its step counts stay on the device); on the CPU it keeps the unfused one, whose step
counts are host tensors read as numbers, so the steps counted here are built as on CUDA.
"""

from __future__ import annotations

import pytest
import torch

from fixedfirst.config import TrainConfig
from fixedfirst.data.prefetch import DeviceBatches
from fixedfirst.data.source import Batch
from fixedfirst.data.synthetic import SyntheticSource
from fixedfirst.model import LoopedTransformer, looped
from fixedfirst.train.host_syncs import HostSyncCounter
from fixedfirst.train.optim import build_optimizer
from fixedfirst.train.parallel import ParallelModel
from fixedfirst.train.step import StepContext, state_seeds, train_step
from tests.conftest import tiny_model_config

META = torch.device("meta")
"""A device other than the host that needs no GPU: a copy to it is a real cross-device copy."""


def counted(work) -> HostSyncCounter:
    with HostSyncCounter() as syncs:
        work()
    return syncs


def test_the_counter_sees_each_kind_of_host_sync_and_nothing_else():
    x = torch.randn(6)
    syncs = {
        "item": lambda: x.sum().item(),
        "bool": lambda: bool((x > 0).any()),
        "int": lambda: int(x.argmax()),
        "nonzero": lambda: x.nonzero(),
        "boolean index": lambda: x[x > 0],
        "equal": lambda: torch.equal(x, x),
        "unique": lambda: torch.unique(x),
        "blocking copy": lambda: x.to(META),
    }
    for name, work in syncs.items():
        assert counted(work).total == 1, name
    quiet = {
        "arithmetic": lambda: (x * 2 + 1).exp().sum(),
        "copy without waiting": lambda: x.to(META, non_blocking=True),
        "integer index": lambda: x[torch.tensor([0, 2])],
        "clamp instead of a branch": lambda: x.clamp(min=0).sum(),
    }
    for name, work in quiet.items():
        assert counted(work).total == 0, name


def step_context(model, dtype=torch.float32, **train) -> StepContext:
    config = TrainConfig(batch_size=4, seq_len=16, micro_batch_size=2, **train)
    optimizer = build_optimizer(model, config, fused=True)  # as the trainer builds it on CUDA
    return StepContext(ParallelModel.alone(model), optimizer, config, dtype)


def batch(rows: int = 4, seq: int = 16) -> Batch:
    x = torch.randint(0, 61, (rows, seq + 1), generator=torch.Generator().manual_seed(0))
    return Batch(x[:, :-1], x[:, 1:])


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"grad_depth": 2},
        {"checkpoint_activations": True},
        {"dtype": torch.bfloat16},
    ],
    ids=["plain", "truncated", "checkpointed", "bf16"],
)
def test_a_training_step_makes_no_host_sync(settings):
    torch.manual_seed(0)
    settings = dict(settings)
    context = step_context(LoopedTransformer(tiny_model_config()), **settings)
    for step, depth in enumerate([1, 4, 3]):  # the first step also makes AdamW's state
        seeds = state_seeds(0, step, range(4))
        syncs = counted(lambda: train_step(context, batch(), depth, 1e-3, seeds))  # noqa: B023
        assert syncs.total == 0, dict(syncs.by_op)


def test_a_rejection_draw_of_the_initial_state_would_be_counted(monkeypatch):
    """The counter sees what the step drew before 2026-12-04: a truncated normal drawn by
    rejection, which asks after every round whether a value is still out of bounds."""

    def by_rejection(shape, std, device="cpu", generator=None):
        values = torch.empty(tuple(shape), device=device).normal_(0, std, generator=generator)
        while (outside := values.abs() > looped.STATE_CLIP * std).any():
            redrawn = torch.empty_like(values).normal_(0, std, generator=generator)
            values = torch.where(outside, redrawn, values)
        return values

    monkeypatch.setattr(looped, "truncated_normal", by_rejection)
    torch.manual_seed(0)
    context = step_context(LoopedTransformer(tiny_model_config()))
    syncs = counted(lambda: train_step(context, batch(), 2, 1e-3, state_seeds(0, 0, range(4))))
    assert syncs.by_op["_local_scalar_dense"] >= 4  # a round per row at least


def test_the_batch_path_copies_without_waiting():
    source = SyntheticSource(vocab_size=61, seq_len=16, seed=0)
    batches = DeviceBatches(source, 8, rank=1, world_size=2, device=META)
    for _ in range(3):
        syncs = counted(lambda: (batches.next(), batches.prefetch()))
        assert syncs.total == 0, dict(syncs.by_op)
    waiting = counted(lambda: batch().targets.to(META))  # the targets' copy as it was
    assert waiting.total == 1


def test_a_checkpoint_taken_with_a_batch_waiting_resumes_at_that_batch():
    """The position saved is that of the next batch to train on, not the source's, which ran
    one batch ahead to prefetch it."""
    cpu = torch.device("cpu")
    straight = DeviceBatches(SyntheticSource(61, 16, seed=3), 4, 0, 1, cpu)
    expected = [straight.next().inputs for _ in range(5)]

    first = DeviceBatches(SyntheticSource(61, 16, seed=3), 4, 0, 1, cpu)
    seen = [first.next().inputs, first.next().inputs]
    first.prefetch()  # batch 3 waits
    saved = first.state_dict()
    resumed = DeviceBatches(SyntheticSource(61, 16, seed=3), 4, 0, 1, cpu)
    resumed.load_state_dict(saved)
    seen += [resumed.next().inputs for _ in range(3)]
    assert all(torch.equal(a, b) for a, b in zip(seen, expected, strict=True))
