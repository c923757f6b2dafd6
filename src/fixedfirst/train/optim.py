"""AdamW with weight decay on matrices only, and the learning-rate schedules.

Norm gains and other vectors are not decayed (decaying a gain towards 0 fights the norm it
belongs to); embedding and linear matrices are. The learning rate is a pure function of
(step, total_steps) so that a resumed run follows the same curve.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from fixedfirst.config import FinishingLR, TrainConfig


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
    `decay` fraction of the steps, then linear decay to the same final value. With a finishing
    stage (`train.finishing`), the steps before it follow this curve over its `start_step` steps
    and the rest follow the stage's own rate (`finishing_lr_at`).
    """
    finishing = config.finishing
    if finishing is not None and finishing.start_step < total_steps:
        if step >= finishing.start_step:
            return finishing_lr_at(step, total_steps, config, finishing)
        total_steps = finishing.start_step
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


def finishing_lr_at(
    step: int, total_steps: int, config: TrainConfig, finishing: FinishingLR
) -> float:
    """The finishing stage's rate at `step` (at or after its start): constant at the original
    run's final rate, or re-warmed linearly from it to `peak * lr` and decayed back by a cosine
    at the last step (docs/guides/any-loop.md, "make your fixed-depth looped model
    depth-flexible")."""
    final = config.lr * config.final_lr_fraction
    if finishing.lr == "constant":
        return final
    peak = config.lr * finishing.peak
    into, steps = step - finishing.start_step, total_steps - finishing.start_step
    warmup_steps = round(finishing.warmup * steps)
    if into < warmup_steps:
        return final + (peak - final) * (into + 1) / warmup_steps
    span = max(1, steps - 1 - warmup_steps)
    progress = min(1.0, (into - warmup_steps) / span)
    return final + (peak - final) * (1 + math.cos(math.pi * progress)) / 2
