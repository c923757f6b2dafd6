"""The exit frontier of one model: what each way of serving it (a fixed depth 1..K, an exit rule
at one of its thresholds) gives in quality for its recurrent iterations per token, and how fast
it decodes.

Quality is teacher-forced through the full cache: every held-out position is decoded as
generation would decode it had it produced exactly these tokens, a stopped position showing
later ones its entries as docs/design.md §19 defines them (`teacher_forced_exit`); a fixed depth
is one pass of the recurrence, which that decoding equals under the full cache. A `HeldOutScorer`
turns each batch's logits and depths into the point's quality: `NextTokenNLL` here, a task's own
metric (chains accuracy by difficulty) in the task's package. Speed is greedy decoding of one
left-padded batch of held-out prompts in the same mode (`decode_steps`, what `generate_batch`
decodes with); every point is timed once per repeat in turn and the median kept, so the points
are measured side by side. `serve/pareto.py` reads the result.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from fixedfirst.compute.flops import flop_model
from fixedfirst.data.source import Batch
from fixedfirst.errors import UserError
from fixedfirst.model import LoopedTransformer, check_depth
from fixedfirst.model.loss import IGNORE_INDEX
from fixedfirst.serve.adaptive import teacher_forced_exit
from fixedfirst.serve.batching import left_pad
from fixedfirst.serve.decoding import decode_steps
from fixedfirst.serve.exit_rules import EXIT_RULES, ExitRule, exit_rule
from fixedfirst.serve.modes import Adaptive, FixedDepth
from fixedfirst.serve.pareto import QualityMeasure

Serving = FixedDepth | Adaptive
Progress = Callable[[str], None]
"""Told the point just measured (a label), once per unit of work."""

DEFAULT_THRESHOLDS: dict[str, tuple[float, ...]] = {
    "kl": (1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4),
    "entropy": (3e-1, 1e-1, 3e-2, 1e-2, 3e-3, 1e-3),
    "state": (3e-1, 1e-1, 3e-2, 1e-2, 3e-3),
    "argmax": (2, 3, 4, 6),
}
"""Each rule's sweep, loosest first: from stopping almost at once to near its default's NLL."""

NLL = QualityMeasure("NLL", "nats per token", "lower", 0.005, relative=True)
"""Validation NLL; a point matches the best fixed depth within 0.5% of its NLL."""


@dataclass(frozen=True)
class Scored:
    """A point's quality on the held-out set and the recurrent iterations it used."""

    quality: float
    mean_depth: float
    """Core iterations per scored token."""
    details: dict[str, Any] = field(default_factory=dict)
    """What else the scorer reports (a task's accuracy and depth by difficulty)."""


class HeldOutScorer(Protocol):
    """A held-out set and how a point's quality is read off the logits decoded on it."""

    measure: QualityMeasure
    batches: list[Batch]

    def tally(self, index: int, logits: torch.Tensor, depths: torch.Tensor) -> Any:
        """What batch `index` contributes: its logits (B, T, V) and depths (B, T)."""
        ...

    def summary(self, tallies: list[Any]) -> Scored:
        """The point's quality from every batch's tally."""
        ...


class NextTokenNLL:
    """Mean next-token NLL and depth over the scored positions of held-out batches."""

    measure = NLL

    def __init__(self, batches: list[Batch]) -> None:
        self.batches = batches

    def tally(self, index: int, logits: torch.Tensor, depths: torch.Tensor) -> np.ndarray:
        targets = self.batches[index].targets.to(logits.device)
        scored = targets != IGNORE_INDEX
        wide = logits.flatten(0, 1).to(torch.promote_types(logits.dtype, torch.float32))
        nll = F.cross_entropy(wide, targets.flatten(), reduction="none")
        return np.array(
            [float(nll[scored.flatten()].sum()), float(depths[scored].sum()), int(scored.sum())]
        )

    def summary(self, tallies: list[np.ndarray]) -> Scored:
        nll, depth, count = np.sum(tallies, axis=0)
        return Scored(float(nll / count), float(depth / count), {"tokens": int(count)})


def servings(
    max_depth: int, depths: Sequence[int], exits: Mapping[str, Sequence[float]]
) -> list[Serving]:
    """The fixed depths (ascending), then each rule of `exits` at each of its thresholds, every
    rule stopping at max_depth at the latest; all through the full cache."""
    check_depth(max_depth, "the deepest serving depth")
    if not depths or any(not 1 <= d <= max_depth for d in depths):
        raise UserError(f"fixed depths must be in 1..{max_depth}, got {list(depths)}")
    modes: list[Serving] = [FixedDepth(d) for d in sorted(set(depths))]
    for name, thresholds in exits.items():
        if name not in EXIT_RULES:
            raise UserError(f"unknown exit rule {name!r}; choose one of {', '.join(EXIT_RULES)}")
        if not thresholds:
            raise UserError(f"the {name} exit rule has no thresholds to sweep; give at least one")
        modes += [Adaptive(exit_rule(name, t, max_depth)) for t in thresholds]
    return modes


def label(mode: Serving) -> str:
    return f"fixed K={mode.depth}" if isinstance(mode, FixedDepth) else mode.describe()


def rule_of(mode: Serving) -> ExitRule | None:
    return mode.rule if isinstance(mode, Adaptive) else None


@torch.no_grad()
def measure_quality(
    model: LoopedTransformer,
    scorer: HeldOutScorer,
    modes: Sequence[Serving],
    progress: Progress | None = None,
) -> list[Scored]:
    """Every mode's quality and depth on the scorer's held-out set, in the order of `modes`.
    The fixed depths come from one pass of the recurrence per batch; each exit rule decodes
    every position of every batch under it."""
    device = next(model.parameters()).device
    fixed = [m.depth for m in modes if isinstance(m, FixedDepth)]
    tallies: dict[int, list[Any]] = {i: [] for i in range(len(modes))}
    index_of = {m.depth: i for i, m in enumerate(modes) if isinstance(m, FixedDepth)}
    for b, batch in enumerate(scorer.batches):
        inputs = batch.inputs.to(device)
        for depth, logits in model.logits_by_depth(inputs, fixed) if fixed else ():
            used = torch.full(inputs.shape, depth, dtype=torch.long, device=device)
            tallies[index_of[depth]].append(scorer.tally(b, logits, used))
        if progress is not None and fixed:
            progress(f"fixed depths, batch {b + 1}")
    for i, mode in enumerate(modes):
        if isinstance(mode, Adaptive):
            for b, batch in enumerate(scorer.batches):
                logits, used = teacher_forced_exit(model, batch.inputs.to(device), mode)
                tallies[i].append(scorer.tally(b, logits, used))
            if progress is not None:
                progress(label(mode))
    return [scorer.summary(tallies[i]) for i in range(len(modes))]


@dataclass(frozen=True)
class SpeedSettings:
    """How decoding speed is measured: `rows` held-out prompts in one batch, `new_tokens` greedy
    tokens each, every point timed `repeats` times in turn (the median kept)."""

    rows: int = 8
    new_tokens: int = 32
    repeats: int = 3

    def __post_init__(self) -> None:
        for name in ("rows", "new_tokens", "repeats"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"speed {name} must be an integer >= 1, got {value!r}")


@dataclass(frozen=True)
class Speed:
    tokens_per_s: float
    mean_depth: float
    """Core iterations per decoded token in this decoding (its own text, not the held-out's)."""
    seconds: float


def speed_prompts(batches: Sequence[Batch], rows: int, window: int, new_tokens: int):
    """The first `rows` held-out rows cut to a prompt that leaves room for `new_tokens` in the
    model's window (at most 16 tokens, at least 1), and the new tokens that fit."""
    inputs = torch.cat([b.inputs for b in batches])[:rows]
    length = max(1, min(16, inputs.shape[1], window - new_tokens))
    return [row[:length].tolist() for row in inputs], min(new_tokens, window - length)


@torch.no_grad()
def measure_speed(
    model: LoopedTransformer,
    prompts: list[list[int]],
    modes: Sequence[Serving],
    settings: SpeedSettings,
    progress: Progress | None = None,
) -> list[Speed]:
    """Tokens per second of greedy decoding of `prompts` as one left-padded batch in each mode,
    the median over `settings.repeats` rounds, each round timing every mode in turn."""
    device = next(model.parameters()).device
    ids, pad = (t.to(device) for t in left_pad(prompts))
    times: list[list[float]] = [[] for _ in modes]
    depths: list[float] = [0.0] * len(modes)
    for _ in range(settings.repeats):
        for i, mode in enumerate(modes):
            start = time.perf_counter()
            used = [d for _, d in decode_steps(model, ids, settings.new_tokens, mode, pad)]
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times[i].append(time.perf_counter() - start)
            depths[i] = float(torch.stack(used).float().mean())
            if progress is not None:
                progress(label(mode))
    tokens = len(prompts) * settings.new_tokens
    return [
        Speed(tokens / statistics.median(t), d, statistics.median(t))
        for t, d in zip(times, depths, strict=True)
    ]


def frontier_points(
    model: LoopedTransformer,
    modes: Sequence[Serving],
    scored: Sequence[Scored],
    speeds: Sequence[Speed] | None,
) -> list[dict[str, Any]]:
    """The points as JSON-ready dicts (`serve/pareto.py` reads them): what each mode is, its
    quality and depth, modeled GFLOPs per token, and its decoding speed (None: not measured);
    a rule's speed also against the fixed depth ceil(its decoding's mean depth), when measured."""
    flops = flop_model(model.config, model.config.max_seq_len)
    points = []
    for i, (mode, s) in enumerate(zip(modes, scored, strict=True)):
        rule = rule_of(mode)
        point: dict[str, Any] = {
            "serving": label(mode),
            "rule": None if rule is None else rule.name,
            "threshold": None if rule is None else rule.threshold,
            "max_depth": mode.max_depth,
            "mean_depth": s.mean_depth,
            "quality": s.quality,
            "gflops": (
                flops.forward(mode.max_depth)
                if rule is None
                else rule.modeled_flops(flops, s.mean_depth)
            )
            / 1e9,
            **s.details,
        }
        if speeds is not None:
            point["tokens_per_s"] = speeds[i].tokens_per_s
            point["decode_mean_depth"] = speeds[i].mean_depth
        points.append(point)
    if speeds is not None:
        fixed_speed = {p["max_depth"]: p["tokens_per_s"] for p in points if p["rule"] is None}
        for p in points:
            if p["rule"] is not None:
                ceil = math.ceil(p["decode_mean_depth"] - 1e-9)
                p["vs_fixed_ceil"] = (
                    p["tokens_per_s"] / fixed_speed[ceil] if ceil in fixed_speed else None
                )
    return points
