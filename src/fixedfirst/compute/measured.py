"""The compute model of a looped model we did not write: FLOPs measured at a few depths.

Our own model's FLOPs follow from its shape (compute/flops.py). Anyone else's are measured: one
training step (forward and backward) and one forward of a batch, under torch's FlopCounterMode,
at each of a few depths, per token, and a straight line through them. Looping a block K times
costs K times the block, so a looped model's FLOPs are affine in K: the line is checked against
every depth measured, and a model more than 1% off it is refused rather than extrapolated. The
result is a `CostModel`, so budgets, compute-matched runs and modeled savings (`plan_schedule`)
work as for our own model. A transformers looped architecture that a run's [model] names is
measured here once per process and configuration (`measured_cost`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from fixedfirst.config import LowRankConfig, TransformersModelConfig
from fixedfirst.errors import UserError
from fixedfirst.model.handles import DepthHandle, ForwardDepth, depth_handle
from fixedfirst.model.loss import next_token_loss
from fixedfirst.model.lowrank import apply_lowrank
from fixedfirst.model.transformers_loop import build

MEASURED_DEPTHS = (1, 2, 3)
"""The depths a transformers architecture's compute model is measured at (FLOPs are affine in
the passes: two would do, the third checks the line)."""

LINEARITY = 0.01
"""How far (relative) a measured depth may lie off the fitted line."""


@dataclass(frozen=True)
class MeasuredFlops:
    """FLOPs per token of a model at depth K, fitted from measurements: base + K * per_depth,
    for one training step (forward and backward) and for one forward."""

    train_base: float
    train_per_depth: float
    forward_base: float
    forward_per_depth: float
    measured: tuple[tuple[int, float, float], ...]
    """(depth, training FLOPs per token, forward FLOPs per token) as counted."""

    def train(self, depth: int, grad_depth: int | None = None) -> float:
        if grad_depth is not None:
            raise UserError(
                "a measured compute model counts full backprop: truncated backprop (grad_depth) "
                "is a feature of fixedfirst's own model"
            )
        return self.train_base + depth * self.train_per_depth

    def forward(self, depth: int) -> float:
        return self.forward_base + depth * self.forward_per_depth

    def eval_all_depths(self, depths: list[int]) -> float:
        """Scoring at every depth of `depths`: one forward per depth (a model we did not write
        has no readout between its passes to score several depths in one)."""
        return sum(self.forward(depth) for depth in set(depths))

    @property
    def non_recurrent_ratio(self) -> float:
        """A forward's work outside the loop over one pass's (the a/b of docs/design.md §3)."""
        return self.forward_base / self.forward_per_depth


def counted_flops(
    model: nn.Module, loss: Callable[[], torch.Tensor], handle: DepthHandle, depth: int
) -> tuple[int, int]:
    """(training, forward) FLOPs torch counts for `loss()` at `depth`: with its backward, and
    without. The model's gradients and random state are left as they were."""
    handle.set_depth(depth)
    params = [p for p in model.parameters() if p.requires_grad]
    grads = [p.grad for p in params]
    devices = sorted({p.device.index or 0 for p in params if p.device.type == "cuda"})
    on_cpu = all(p.device.type == "cpu" for p in model.parameters())
    # On the CPU torch's fused attention kernel is invisible to the counter; its math backend
    # decomposes attention into matmuls the counter sees (the same FLOPs).
    attention = sdpa_kernel(SDPBackend.MATH) if on_cpu else contextlib.nullcontext()
    try:
        with torch.random.fork_rng(devices=devices), attention:
            for p in params:
                p.grad = None
            with FlopCounterMode(display=False) as training:
                loss().backward()
            # Not under no_grad: the counter's module tracker fails there on some models
            # (transformers' Inkling2Loop, torch 2.13). The graph is dropped unused.
            with FlopCounterMode(display=False) as forward:
                loss()
    finally:
        for p, g in zip(params, grads, strict=True):
            p.grad = g
    return training.get_total_flops(), forward.get_total_flops()


def measure_flops(
    model: nn.Module,
    loss: Callable[[], torch.Tensor],
    tokens: int,
    depths: Iterable[int] = (1, 2, 3),
    handle: DepthHandle | None = None,
) -> MeasuredFlops:
    """The compute model of `model`: `loss()` runs one forward of a batch of `tokens` tokens at
    the training sequence length (attention's cost depends on it) and returns its loss; it is
    counted at each of `depths` (two at least) and fitted linear in the depth. `handle` sets the
    depth (default: a handle of its own, taken off the model again; a handle given is left at
    the last depth measured)."""
    own = None
    if handle is None:
        handle = own = depth_handle(model)
    try:
        return fitted_flops(model, loss, tokens, depths, handle)
    finally:
        if isinstance(own, ForwardDepth):
            own.remove()


def fitted_flops(
    model: nn.Module,
    loss: Callable[[], torch.Tensor],
    tokens: int,
    depths: Iterable[int],
    handle: DepthHandle,
) -> MeasuredFlops:
    """`measure_flops` with its handle."""
    depths = sorted(set(depths))
    if len(depths) < 2:
        raise UserError(f"measure_flops needs two depths or more to fit a line, got {depths}")
    if tokens < 1:
        raise UserError(f"tokens must be the batch's token count (>= 1), got {tokens}")
    measured = []
    for depth in depths:
        train, forward = counted_flops(model, loss, handle, depth)
        measured.append((depth, train / tokens, forward / tokens))
    train_line = fit_line([(k, t) for k, t, _ in measured])
    forward_line = fit_line([(k, f) for k, _, f in measured])
    for k, t, f in measured:
        for what, value, (base, slope) in (
            ("training", t, train_line),
            ("forward", f, forward_line),
        ):
            line = base + slope * k
            if abs(value - line) > LINEARITY * abs(line):
                raise UserError(
                    f"{type(model).__name__}'s {what} FLOPs are not linear in the depth: "
                    f"{value:.4g} per token at depth {k}, {line:.4g} on the line through "
                    f"depths {depths}; its compute cannot be modeled as base + depth * pass"
                )
    return MeasuredFlops(*train_line, *forward_line, tuple(measured))


def fit_line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares (intercept, slope) of y on x."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx
    return mean_y - slope * mean_x, slope


def measured_cost(
    config: TransformersModelConfig, seq_len: int, lowrank: LowRankConfig | None = None
) -> MeasuredFlops:
    """The compute model of a transformers looped architecture at the training sequence length:
    one sequence counted at MEASURED_DEPTHS on the CPU. With `lowrank`, the model as a low-rank
    run trains it: its adapters' work counted, and no gradient of the frozen weights (a
    training step then costs about two forwards, not three)."""
    options = json.dumps(config.options, sort_keys=True)
    adapters = None if lowrank is None else json.dumps(dataclasses.asdict(lowrank))
    return cached_cost(config.architecture, options, seq_len, adapters)


@functools.cache
def cached_cost(
    architecture: str, options: str, seq_len: int, lowrank: str | None = None
) -> MeasuredFlops:
    """`measured_cost`, keyed by hashable values."""
    section = TransformersModelConfig("transformers", architecture, json.loads(options))
    # A draw of weights and tokens of its own: the caller's random state is left as it was.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = build(section)
        if lowrank is not None:
            model.network = apply_lowrank(model.network, LowRankConfig(**json.loads(lowrank)))
        model.handle.set_depth(max(MEASURED_DEPTHS))  # one that cannot run: refused, unrun
        tokens = torch.randint(0, section.vocab_size, (1, seq_len + 1))
        inputs, targets = tokens[:, :-1], tokens[:, 1:]

        def loss() -> torch.Tensor:
            return next_token_loss(model.network(input_ids=inputs, use_cache=False).logits, targets)

        return measure_flops(model.network, loss, seq_len, MEASURED_DEPTHS, model.handle)
