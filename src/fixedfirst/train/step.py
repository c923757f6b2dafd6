"""One optimizer step: the one place a looped model is trained, by the trainer and the diagnostic.

A step at depth K runs this process's rows of the global batch in micro-batches, accumulates the
gradients of the loss, clips and takes an AdamW step; the diagnostic calls it with the model
alone and so takes exactly the steps the run took. The loss is the mean over the scored tokens
of the whole global batch, and each row's initial state is drawn from (seed, step, row), so the
gradient depends neither on the split into micro-batches and ranks nor on what ran before
(docs/design.md §8). The loss and gradient norm a step returns stay on the device; `host_values`
brings those of many steps to the host at once, the ranks' shares of each loss summed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from fixedfirst.config import TrainConfig
from fixedfirst.data.source import Batch
from fixedfirst.evaluation.nll import autocast
from fixedfirst.model.loss import IGNORE_INDEX, next_token_loss
from fixedfirst.train import distributed
from fixedfirst.train.distributed import World, all_sum
from fixedfirst.train.parallel import ParallelModel

_STATE_NOISE_STREAM = 0x5EED_57A7E
"""Keeps the initial-state seeds apart from every other stream derived from the run seed."""


def state_seeds(seed: int, step: int, rows: range) -> list[int]:
    """Seeds of the random initial recurrent state of the given rows of a step's global batch."""
    return [
        int(
            np.random.SeedSequence([seed, step, row, _STATE_NOISE_STREAM]).generate_state(
                1, np.uint64
            )[0]
        )
        for row in rows
    ]


@dataclass(frozen=True)
class StepContext:
    """What every step of a run is taken with, the same from one step to the next."""

    model: ParallelModel
    """The model as this process trains it: the trainer's DDP/FSDP2 wrapper, or
    `ParallelModel.alone(model)` (the diagnostic, one process)."""
    optimizer: torch.optim.Optimizer
    train: TrainConfig
    dtype: torch.dtype = torch.float32
    """What the forward computes in (under autocast when bfloat16)."""


def train_step(
    context: StepContext, batch: Batch, depth: int, lr: float, row_seeds: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """One step at `depth` on this process's `batch` (on the model's device); returns (loss,
    gradient norm before clipping), both still on the device: no host sync. The loss is this
    process's share of the global batch's mean loss per scored token: the shares of all ranks
    sum to it (one process: the mean itself). Gradients are reduced across ranks only after the
    last micro-batch.

    row_seeds: one initial-state seed per row of `batch` (`state_seeds` of its global rows).
    """
    rows = batch.inputs.shape[0]
    if len(row_seeds) != rows:
        raise ValueError(f"{len(row_seeds)} row seeds for a batch of {rows} rows")
    model, optimizer, train = context.model, context.optimizer, context.train
    for group in optimizer.param_groups:
        group["lr"] = lr
    device = batch.inputs.device
    ranks = model.world.world_size
    micro = train.micro_batch(ranks)
    if rows % micro:
        raise ValueError(f"a batch of {rows} rows does not split into micro-batches of {micro}")
    micro_steps = rows // micro
    scored = all_sum(model.world, (batch.targets != IGNORE_INDEX).sum())
    # Summed token losses over the global count (`forward_backward` scales each rank's part up
    # by the number of ranks, which DDP and FSDP2 average gradients over). A batch scoring
    # nothing gives zero.
    per_token = 1.0 / scored.clamp(min=1).to(torch.float32)
    total_loss = torch.zeros((), device=device)
    for i in range(micro_steps):
        part = slice(i * micro, (i + 1) * micro)
        total_loss += forward_backward(
            context,
            Batch(batch.inputs[part], batch.targets[part]),
            depth,
            row_seeds[part],
            per_token,
            last=i == micro_steps - 1,
        )
    grad_norm = model.clip_grad_norm(train.grad_clip if train.grad_clip > 0 else float("inf"))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return total_loss, grad_norm


def host_values(
    world: World, steps: Sequence[tuple[torch.Tensor, torch.Tensor, int]]
) -> list[tuple[float, float]]:
    """(loss, gradient norm) of each of `steps`, given as (loss, gradient norm, depth) the way
    `train_step` returned them on this rank: one device sync, one collective (the trainer's, at
    a log line).

    Each rank's loss is its share of the global batch's mean loss per scored token, so their sum
    is the loss of the step, whatever the number of processes. The same collective checks that
    every rank trained at the same depths.
    """
    values_here = torch.stack([torch.stack([loss, norm.float()]) for loss, norm, _ in steps])
    depths = torch.tensor([float(d) for _, _, d in steps], device=values_here.device)
    local = torch.cat([values_here, depths[:, None]], dim=1).double()
    gathered = distributed.gather(world, local).cpu()  # (ranks, steps, 3)
    if not torch.equal(gathered[:, :, 2], gathered[:1, :, 2].expand_as(gathered[:, :, 2])):
        raise RuntimeError(f"ranks trained at different depths: {gathered[:, :, 2].tolist()}")
    losses = gathered[:, :, 0].sum(dim=0).tolist()
    grad_norms = gathered[0, :, 1].tolist()  # identical on every rank after the reduction
    return list(zip(losses, grad_norms, strict=True))


def forward_backward(
    context: StepContext,
    micro_batch: Batch,
    depth: int,
    row_seeds: Sequence[int],
    per_token: torch.Tensor,
    last: bool = True,
) -> torch.Tensor:
    """One micro-batch's forward and backward at `depth`: its summed token losses times
    `per_token` (1 / the global batch's scored tokens), whose gradients accumulate in the
    parameters; reduced across ranks when `last` (DDP and FSDP2 average over the ranks, so
    each rank's part is scaled up by their number). Returns that loss, detached, on the device.
    The warm-up before step 0 (train/warm_up.py) runs it alone, at the deepest depth."""
    model, train = context.model, context.train
    with model.gradient_sync(last):
        with autocast(micro_batch.inputs.device, context.dtype):
            logits = model.train_module(
                micro_batch.inputs,
                depth,
                train.grad_depth,
                row_seeds,
                checkpoint=train.checkpoint_activations,
            )
        loss = next_token_loss(logits, micro_batch.targets, reduction="sum") * per_token
        (loss * model.world.world_size).backward()
    return loss.detach()
