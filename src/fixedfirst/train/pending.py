"""Finished steps whose loss is still on the device, and bringing them to the host at a log line.

The trainer keeps each step's loss and gradient norm as device tensors, so that the host waits for
the device only when a line is written (docs/design.md §10: host syncs only at log lines).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fixedfirst.train import distributed
from fixedfirst.train.distributed import World


@dataclass
class PendingStep:
    """A finished step whose loss is still on the device."""

    step: int
    depth: int
    phase: str
    lr: float
    loss: torch.Tensor
    grad_norm: torch.Tensor


def host_values(world: World, pending: list[PendingStep]) -> list[tuple[float, float]]:
    """(loss, gradient norm) of every pending step: one device sync, one collective.

    Each rank's loss is its share of the global batch's mean loss per scored token
    (`train_step`), so their sum is the loss of the step, whatever the number of processes. The
    same collective checks that every rank trained at the same depths.
    """
    values_here = torch.stack([torch.stack([p.loss, p.grad_norm.float()]) for p in pending])
    depths = torch.tensor([float(p.depth) for p in pending], device=values_here.device)
    local = torch.cat([values_here, depths[:, None]], dim=1).double()
    gathered = distributed.gather(world, local).cpu()  # (ranks, steps, 3)
    if not torch.equal(gathered[:, :, 2], gathered[:1, :, 2].expand_as(gathered[:, :, 2])):
        raise RuntimeError(f"ranks trained at different depths: {gathered[:, :, 2].tolist()}")
    losses = gathered[:, :, 0].sum(dim=0).tolist()
    grad_norms = gathered[0, :, 1].tolist()  # identical on every rank after the reduction
    return list(zip(losses, grad_norms, strict=True))
