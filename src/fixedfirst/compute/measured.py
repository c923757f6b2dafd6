"""The compute model of a looped model we did not write: FLOPs measured at a few depths.

Our own model's FLOPs follow from its shape (compute/flops.py). Anyone else's are measured: one
training step (forward and backward) and one forward of a batch, under torch's FlopCounterMode,
at each of a few depths, per token, and a straight line through them. Looping a block K times
costs K times the block, so a looped model's FLOPs are affine in K: the line is checked against
every depth measured, and a model more than 1% off it is refused rather than extrapolated. A
line through a few shallow depths can hold there and fail deep (a model whose depth lengthens its
sequence is within 1% at 1..3 and 49% off at 32), so a plan counts its deepest depth once more
and checks the line there (`MeasuredFlops.check_line_at`). A model that ignores its handle and
draws its own depth is caught by counting one depth twice under two random states. The result
is a `CostModel`, so budgets, compute-matched runs and modeled savings (`plan_schedule`) work as
for our own model. A transformers looped architecture that a run's [model] names is measured
here once per process, configuration and deepest depth (`measured_cost`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from fixedfirst.config import LowRankConfig, TransformersModelConfig
from fixedfirst.config.schema import coerce
from fixedfirst.errors import UserError
from fixedfirst.model.handles import DepthHandle, ForwardArgumentDepth, checked_handle, depth_handle
from fixedfirst.model.loss import next_token_loss
from fixedfirst.model.lowrank import apply_lowrank
from fixedfirst.model.transformers_loop import build

MEASURED_DEPTHS = (1, 2, 3)
"""The depths a transformers architecture's compute model is measured at (FLOPs are affine in
the passes: two would do, the third checks the line)."""

LINEARITY = 0.01
"""How far (relative) a measured depth may lie off the fitted line."""

OWN_COST = (
    "pass plan_schedule a compute model of your own (any object with train(depth, grad_depth) "
    "and forward(depth): FLOPs per token)"
)
"""The way forward from a model whose FLOPs are not a line in its depth."""

Recount = Callable[[int], tuple[float, float]]
"""(training, forward) FLOPs per token counted at a depth."""


@dataclass(frozen=True)
class MeasuredFlops:
    """FLOPs per token of a model at depth K, fitted from measurements: base + K * per_depth,
    for one training step (forward and backward) and for one forward."""

    train_base: float
    train_per_depth: float
    forward_base: float
    forward_per_depth: float
    measured: tuple[tuple[int, float, float], ...]
    """(depth, training FLOPs per token, forward FLOPs per token) as counted (the fitted ones)."""
    model_name: str = "the model"
    recount: Recount | None = field(default=None, compare=False, repr=False)
    """Counts the model again at a deeper depth (`check_line_at`); None: it cannot be counted
    again (its line holds only as deep as it was checked)."""
    checked: dict[int, tuple[float, float]] = field(default_factory=dict, compare=False)
    """Deeper depths counted since, only to check the line there: depth -> (training,
    forward) FLOPs per token."""

    @property
    def deepest_checked(self) -> int:
        """The deepest depth at which the line was compared with a count."""
        return max([k for k, _, _ in self.measured] + list(self.checked))

    def check_line_at(self, depth: int) -> None:
        """Count `depth` (once) and refuse the model if its counts there are off the line: what a
        plan calls with its deepest depth before it trusts the line there."""
        if depth <= self.deepest_checked:
            return
        if self.recount is None:
            raise UserError(
                f"{self.model_name}'s compute model was checked up to depth "
                f"{self.deepest_checked}, not at {depth}; measure it again with "
                f"measure_flops(..., check_at={depth}), or {OWN_COST}"
            )
        train, forward = self.recount(depth)
        self.checked[depth] = (train, forward)
        fitted = [k for k, _, _ in self.measured]
        off_line(self.model_name, "training", depth, train, self.train(depth), fitted)
        off_line(self.model_name, "forward", depth, forward, self.forward(depth), fitted)

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
    model: nn.Module, loss: Callable[[], Any], handle: DepthHandle, depth: int, seed: int = 0
) -> tuple[int, int]:
    """(training, forward) FLOPs torch counts for `loss()` at `depth`: with its backward, and
    without, under torch's random state seeded with `seed`. The model's gradients and the
    caller's random state are left as they were."""
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
            torch.manual_seed(seed)
            for p in params:
                p.grad = None
            with FlopCounterMode(display=False) as training:
                scalar_loss(loss()).backward()
            # Not under no_grad: the counter's module tracker fails there on some models
            # (transformers' Inkling2Loop, torch 2.13). The graph is dropped unused.
            with FlopCounterMode(display=False) as forward:
                loss()
    finally:
        for p, g in zip(params, grads, strict=True):
            p.grad = g
    return training.get_total_flops(), forward.get_total_flops()


def scalar_loss(value: Any) -> torch.Tensor:
    """`loss()`'s value, which must be the loss: a one-element tensor that backward can start
    from (not the model's output, not its logits)."""
    if not isinstance(value, torch.Tensor):
        hint = " (return model(...).loss)" if hasattr(value, "logits") else ""
        raise UserError(
            f"measure_flops: loss() must return the batch's loss, a scalar tensor; it returned "
            f"{type(value).__name__}{hint}"
        )
    if value.numel() != 1 or not value.requires_grad:
        what = f"a tensor of shape {tuple(value.shape)}" if value.numel() != 1 else "no gradient"
        raise UserError(
            f"measure_flops: loss() must return the batch's loss, a scalar tensor with a gradient; "
            f"it returned {what} (the logits? reduce them to the loss, e.g. cross_entropy)"
        )
    return value


def measure_flops(
    model: nn.Module,
    loss: Callable[[], torch.Tensor],
    tokens: int,
    depths: Iterable[int] = (1, 2, 3),
    handle: DepthHandle | None = None,
    check_at: int | None = None,
) -> MeasuredFlops:
    """The compute model of `model`: `loss()` runs one forward of a batch of `tokens` tokens at
    the training sequence length (attention's cost depends on it) and returns its loss; it is
    counted at each of `depths` (two at least) and fitted linear in the depth, and counted at
    `check_at` (a plan's deepest depth; `plan_schedule` counts its own) to check the line there.
    `handle` sets the depth (default: a handle of its own, taken off the model again; a handle
    given is left at the last depth measured)."""
    given = None if handle is None else checked_handle(handle, "measure_flops's handle")
    tokens = coerce(tokens, int, "tokens")
    depths = sorted({coerce(k, int, "depths") for k in depths})

    def count(depth: int, seed: int) -> tuple[float, float]:
        own = None
        counting = given if given is not None else (own := depth_handle(model))
        try:
            train, forward = counted_flops(model, loss, counting, depth, seed)
        finally:
            if isinstance(own, ForwardArgumentDepth):
                own.remove()
        return train / tokens, forward / tokens

    fitted = fitted_flops(type(model).__name__, count, tokens, depths)
    measured = replace(fitted, recount=count_once(count))
    if check_at is not None:
        measured.check_line_at(coerce(check_at, int, "check_at"))
    return measured


def count_once(count: Callable[[int, int], tuple[float, float]]) -> Recount:
    """A recount at a depth under one more random state (the line is checked there)."""
    return lambda depth: count(depth, 0)


def fitted_flops(
    name: str,
    count: Callable[[int, int], tuple[float, float]],
    tokens: int,
    depths: list[int],
) -> MeasuredFlops:
    """The line through the counts (`count(depth, seed)`, per token) at `depths`, each counted
    under its own random state, the first depth counted twice: a model that draws its own depth
    counts differently, and one whose counts do not grow with the depth is not reached by its
    handle."""
    if len(depths) < 2:
        raise UserError(f"measure_flops needs two depths or more to fit a line, got {depths}")
    if tokens < 1:
        raise UserError(f"tokens must be the batch's token count (>= 1), got {tokens}")
    if depths[0] < 1:
        raise UserError(f"depths must be >= 1, got {depths}")
    measured = []
    for seed, depth in enumerate(depths, 1):
        train, forward = count(depth, seed)
        measured.append((depth, train, forward))
    again = count(depths[0], len(depths) + 1)
    if again != measured[0][1:]:
        raise UserError(
            f"{name} counts {again[0]:.4g} and {measured[0][1]:.4g} training FLOPs per token at "
            f"depth {depths[0]} under two random states: your model draws its own depth; the "
            "handle is not reaching it (give the depth to every forward: depth_handle(model, "
            "forward_kwarg=NAME) for a forward argument)"
        )
    train_line = fit_line([(k, t) for k, t, _ in measured])
    forward_line = fit_line([(k, f) for k, _, f in measured])
    if train_line[1] <= 0 or forward_line[1] <= 0:
        raise UserError(
            f"{name}'s FLOPs do not grow with the depth its handle sets ({measured[0][2]:.4g} "
            f"forward FLOPs per token at depth {depths[0]}, {measured[-1][2]:.4g} at "
            f"{depths[-1]}): the handle is not reaching the model's loop"
        )
    for k, t, f in measured:
        off_line(name, "training", k, t, train_line[0] + train_line[1] * k, depths)
        off_line(name, "forward", k, f, forward_line[0] + forward_line[1] * k, depths)
    return MeasuredFlops(*train_line, *forward_line, tuple(measured), name)


def off_line(
    name: str, what: str, depth: int, value: float, line: float, fitted: list[int]
) -> None:
    """Refuse a count more than LINEARITY off the fitted line, saying the way forward."""
    if abs(value - line) > LINEARITY * abs(line):
        raise UserError(
            f"{name}'s {what} FLOPs are not linear in the depth: {value:.4g} per token at "
            f"depth {depth}, {line:.4g} on the line through depths {fitted} "
            f"({(value - line) / line:+.0%}); its compute cannot be modeled as base + depth * "
            f"pass: {OWN_COST}"
        )


def fit_line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares (intercept, slope) of y on x."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx
    return mean_y - slope * mean_x, slope


def measured_cost(
    config: TransformersModelConfig,
    seq_len: int,
    lowrank: LowRankConfig | None = None,
    deepest: int = max(MEASURED_DEPTHS),
) -> MeasuredFlops:
    """The compute model of a transformers looped architecture at the training sequence length:
    one sequence counted at MEASURED_DEPTHS on the CPU, the line checked at `deepest` (the
    plan's deepest depth). With `lowrank`, the model as a low-rank run trains it: its adapters'
    work counted, and no gradient of the frozen weights (a training step then costs about two
    forwards, not three)."""
    options = json.dumps(config.options, sort_keys=True)
    adapters = None if lowrank is None else json.dumps(dataclasses.asdict(lowrank))
    deepest = max(deepest, max(MEASURED_DEPTHS))
    return cached_cost(config.architecture, options, seq_len, adapters, deepest)


@functools.cache
def cached_cost(
    architecture: str, options: str, seq_len: int, lowrank: str | None, deepest: int
) -> MeasuredFlops:
    """`measured_cost`, keyed by hashable values."""
    section = TransformersModelConfig("transformers", architecture, json.loads(options))
    # A draw of weights and tokens of its own: the caller's random state is left as it was.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = build(section)
        if lowrank is not None:
            model.network = apply_lowrank(model.network, LowRankConfig(**json.loads(lowrank)))
        model.handle.set_depth(deepest)  # one that cannot run: refused, unrun
        tokens = torch.randint(0, section.vocab_size, (1, seq_len + 1))
        inputs, targets = tokens[:, :-1], tokens[:, 1:]

        def loss() -> torch.Tensor:
            return next_token_loss(model.network(input_ids=inputs, use_cache=False).logits, targets)

        measured = measure_flops(model.network, loss, seq_len, MEASURED_DEPTHS, model.handle)
        measured.check_line_at(deepest)
        return replace(measured, recount=None)  # the model is not kept alive by the cache
