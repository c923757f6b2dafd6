"""AdamW with weight decay on matrices only, and the learning-rate schedules.

Norm gains and other vectors are not decayed (decaying a gain towards 0 fights the norm it
belongs to); embedding and linear matrices are. The learning rate is a pure function of
(step, total_steps) so that a resumed run follows the same curve.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from fixedfirst.config import TrainConfig


def build_optimizer(
    model: nn.Module, config: TrainConfig, fused: bool = False
) -> torch.optim.AdamW:
    """AdamW over `model`'s parameters. `fused` (the trainer's choice on CUDA): a few kernels
    update every tensor, and the step counts live on the device, so a step reads no value on
    the host (the unfused one reads its step counts there, which on a GPU costs launches, not
    a sync). The CPU keeps the unfused one: runs trained there stay bit for bit what they were."""
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.dim() >= 2 else no_decay).append(p)
    groups = [
        {"params": decay, "weight_decay": config.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(
        groups, lr=config.lr, betas=(config.beta1, config.beta2), fused=fused or None
    )


def lr_at(step: int, total_steps: int, config: TrainConfig) -> float:
    """Learning rate of optimizer step `step` (0-based) in a run of `total_steps` steps.

    Linear warmup over the first `warmup` fraction of the steps; then either cosine decay to
    `final_lr_fraction * lr` at the last step, or warmup-stable-decay: constant until the last
    `decay` fraction of the steps, then linear decay to the same final value.
    """
    peak, final = config.lr, config.lr * config.final_lr_fraction
    warmup_steps = round(config.warmup * total_steps)
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    if config.lr_schedule == "cosine":
        span = max(1, total_steps - 1 - warmup_steps)
        progress = min(1.0, (step - warmup_steps) / span)
        return final + (peak - final) * 0.5 * (1 + math.cos(math.pi * progress))
    decay_steps = round(config.decay * total_steps)
    decay_start = total_steps - decay_steps
    if step < decay_start or decay_steps == 0:
        return peak
    progress = (step - decay_start + 1) / decay_steps
    return peak + (final - peak) * progress
