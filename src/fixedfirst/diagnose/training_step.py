"""One optimizer step exactly as the trainer takes it, as a free function.

The diagnostic takes optimizer steps of its own (the run's finishing steps, and the depth-4 /
depth-16 update pairs) outside `Trainer`, which is tied to a run directory it writes to. These
steps must be the trainer's steps, not something like them: the same micro-batch accumulation,
per-row initial-state seeds, cross-entropy with ignored targets, gradient clipping and AdamW step,
so that the states the diagnostic measures are the states the run passed through. A test holds
`optimizer_step` against the trainer's own checkpoints bit for bit; keep the two in step when
either changes. (One process: a run trained on N processes is continued on one, which computes
the same global-batch gradient up to the order of the reduction.)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from fixedfirst.config import TrainConfig
from fixedfirst.data.source import Batch
from fixedfirst.model import LoopedTransformer
from fixedfirst.train.evaluation import autocast


def optimizer_step(
    model: LoopedTransformer,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    depth: int,
    lr: float,
    train: TrainConfig,
    row_seeds: Sequence[int],
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Train `model` one step at `depth` on the whole `batch` (already on the model's device).

    row_seeds: one seed per row of `batch` for its random initial recurrent state (the trainer
    uses `fixedfirst.train.trainer.state_seeds(seed, step, rows)`). Returns the batch's mean
    loss, still on the device (no host sync).
    """
    device = batch.inputs.device
    rows = batch.inputs.shape[0]
    if len(row_seeds) != rows:
        raise ValueError(f"{len(row_seeds)} row seeds for a batch of {rows} rows")
    model.train()
    for group in optimizer.param_groups:
        group["lr"] = lr
    micro_steps = max(1, rows // train.micro_batch)
    total_loss = torch.zeros((), device=device)
    for i in range(micro_steps):
        part = slice(i * train.micro_batch, (i + 1) * train.micro_batch)
        with autocast(device, dtype):
            logits = model(batch.inputs[part], depth, train.grad_depth, row_seeds[part])
        loss = F.cross_entropy(
            logits.float().flatten(0, 1), batch.targets[part].flatten(), ignore_index=-100
        )
        (loss / micro_steps).backward()
        total_loss += loss.detach() / micro_steps
    params = [p for p in model.parameters() if p.grad is not None]
    max_norm = train.grad_clip if train.grad_clip > 0 else float("inf")
    torch.nn.utils.clip_grad_norm_(params, max_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return total_loss
