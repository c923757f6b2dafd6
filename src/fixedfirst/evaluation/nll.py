"""Validation NLL at many serving depths, averaged over fixed held-out batches."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from fixedfirst.data.source import Batch
from fixedfirst.machine.device import exact_float32
from fixedfirst.model import LoopedLM
from fixedfirst.model.loss import IGNORE_INDEX

SERVING_RANGE = range(1, 17)
"""The paper's "mean serving NLL" averages NLL over serving depths 1..16."""
EVAL_DEPTHS = [*SERVING_RANGE, 32, 64]
"""The serving depths a finished run is evaluated at: the training range 1..16 and two beyond."""


def autocast(device: torch.device, dtype: torch.dtype):
    """bf16 autocast where asked for; a no-op context for fp32."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def exact(device: torch.device, dtype: torch.dtype):
    """An fp32 evaluation on a GPU without TF32, so that it scores what a CPU scores (training
    there uses TF32: machine/device.py)."""
    if dtype == torch.float32 and device.type == "cuda":
        return exact_float32()
    return contextlib.nullcontext()


def run_eval_dtypes(device: torch.device, dtype: torch.dtype) -> list[torch.dtype]:
    """What a run's evaluations compute in: the run's precision; on a GPU a bf16 run's last
    evaluation in fp32 too (`exact`), which is what a CPU scores."""
    if device.type == "cuda" and dtype != torch.float32:
        return [dtype, torch.float32]
    return [dtype]


@dataclass
class HeldOutScores:
    """A held-out set scored at several depths: per scored token over the whole set, and (when
    asked for) per row, so that an interval can cover the held-out sample too."""

    nll: dict[int, float]
    """Mean NLL per scored token at each depth over every row."""
    row_nll: dict[int, list[float]] = field(default_factory=dict)
    """Each row's mean NLL per scored token, at each depth (rows in order; empty if not asked)."""
    row_tokens: list[int] = field(default_factory=list)
    """Each row's scored tokens."""


def score_held_out(
    model: LoopedLM,
    batches: list[Batch],
    depths: list[int],
    device: torch.device,
    dtype: torch.dtype = torch.float32,
    progress: Callable[[int, int], None] | None = None,
    rows: bool = False,
) -> HeldOutScores:
    """Mean NLL per scored token at each depth over all `batches`, one pass of the recurrence
    per batch, and with `rows` each row's too; `progress(done, total)` after each batch.

    Weighted by tokens, not by batch: a batch with fewer scored targets (padding, targets of
    IGNORE_INDEX) counts for less, so the result is the NLL of the whole held-out set."""
    was_training = model.training
    model.eval()
    totals = dict.fromkeys(depths, 0.0)
    per_row: dict[int, list[float]] = {d: [] for d in depths} if rows else {}
    row_tokens: list[int] = []
    scored = 0
    try:
        for done, batch in enumerate(batches):
            if progress is not None:
                progress(done, len(batches))
            b = batch.to(device)
            n = b.scored_tokens
            if n == 0 and not rows:
                continue
            with torch.no_grad(), autocast(device, dtype), exact(device, dtype):
                if rows:
                    nll, sums = model.row_nll_by_depth(b.inputs, b.targets, depths)
                else:
                    nll, sums = model.nll_by_depth(b.inputs, b.targets, depths), {}
            for d in depths:
                totals[d] += nll[d] * n
            if rows:
                counts = (b.targets != IGNORE_INDEX).sum(dim=1)
                for d in depths:
                    per_row[d] += (sums[d] / counts.clamp(min=1)).tolist()
                row_tokens += counts.tolist()
            scored += n
    finally:
        model.train(was_training)
    if scored == 0:
        raise ValueError("the validation batches score no tokens (every target is ignored)")
    return HeldOutScores({d: totals[d] / scored for d in depths}, per_row, row_tokens)


def validation_nll(
    model: LoopedLM,
    batches: list[Batch],
    depths: list[int],
    device: torch.device,
    dtype: torch.dtype = torch.float32,
    progress: Callable[[int, int], None] | None = None,
) -> dict[int, float]:
    """Mean NLL per scored token at each depth over all `batches` (`score_held_out`)."""
    return score_held_out(model, batches, depths, device, dtype, progress).nll


def mean_serving_nll(nll_by_depth: dict[int, float]) -> float | None:
    """Mean over depths 1..16, when all of them were measured."""
    if all(d in nll_by_depth for d in SERVING_RANGE):
        return sum(nll_by_depth[d] for d in SERVING_RANGE) / len(SERVING_RANGE)
    return None
