"""What `fixedfirst inspect` measures: every position of some sequences at every serving depth,
and where each exit rule stops on it.

At fixed depths everything comes from ONE pass of the recurrence per window
(`LoopedTransformer.logits_by_depth`), scored by the one loss (`next_token_loss`, per position),
so the numbers are those of `fixedfirst eval` on the same tokens: the mean over the scored
positions equals eval's NLL when the sequences are eval's. That pass is what the full cache
decodes; at a depth where the page's cache strategy keeps fewer entries than iterations, the
window is instead decoded through that cache one position at a time (`serve.decoding.
teacher_forced`), as generation would. Another looped model (a transformers one) decodes each
window in one step per depth through a fresh cache, the serving path (model/serving.py), which
has no exit rules to show: it has no readout between its passes. Exit rules are the serving ones
(serve/exit_rules.py), applied by `teacher_forced_exit` through the same cache: every position
decoded under the rule as generation would if it had produced these tokens, earlier positions
showing later ones what the strategy keeps of their iterations (docs/design.md §12, §19).

A sequence longer than the model's window is scored in consecutive windows of max_seq_len
positions, each from an empty context, as eval scores its validation windows.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import torch

from fixedfirst.data.registry import ScoredSequence
from fixedfirst.evaluation.nll import autocast
from fixedfirst.model import FULL_CACHE, CacheStrategy, LoopedTransformer
from fixedfirst.model.loss import IGNORE_INDEX, next_token_loss
from fixedfirst.model.serving import LoopedDecoder, model_device, with_readout_per_pass
from fixedfirst.serve.decoding import teacher_forced
from fixedfirst.serve.exit_rules import ExitRule
from fixedfirst.serve.modes import Adaptive, FixedDepth

LOGITS_PER_BATCH = 1 << 24
"""Logit values a batch of windows may hold at once (64 MB in float32): windows are batched up
to this, so a long text with a large vocabulary does not hold all its logits at once."""


@dataclass(frozen=True)
class Window:
    """Positions [start, end) of sequence `sequence`, scored in one forward."""

    sequence: int
    start: int
    end: int


@dataclass
class RuleStops:
    """Where one exit rule stopped at every position, and what it read out there."""

    rule: ExitRule
    depth: np.ndarray
    """(N,) the depth it stopped at."""
    nll: np.ndarray
    """(N,) the target's NLL in the distribution it stopped with (NaN where not scored)."""
    top: np.ndarray
    """(N,) the most likely token of that distribution."""


@dataclass
class Inspection:
    """Every position of the sequences, in order, one after another (N in all)."""

    sequences: list[ScoredSequence]
    depths: list[int]
    windows: list[Window]
    nll: np.ndarray
    """(D, N) NLL of the target at each depth (NaN where the target is not scored)."""
    top: np.ndarray
    """(D, N) the most likely token at each depth."""
    top_probability: np.ndarray
    """(D, N) its probability."""
    rules: list[RuleStops]

    @property
    def targets(self) -> np.ndarray:
        return np.array([t for s in self.sequences for t in s.targets], dtype=np.int64)

    @property
    def scored(self) -> np.ndarray:
        return self.targets != IGNORE_INDEX

    def mean_nll(self) -> dict[int, float]:
        """Mean NLL over the scored positions at each depth: eval's number on these tokens."""
        return {d: float(self.nll[i, self.scored].mean()) for i, d in enumerate(self.depths)}

    def stable_from(self) -> np.ndarray:
        """(N,) the shallowest inspected depth from which the top prediction no longer changes
        (equals the deepest depth's at every deeper inspected depth)."""
        same = self.top == self.top[-1]
        # index of the first depth of the trailing run of agreement with the deepest depth
        changed = ~same
        last_change = np.where(
            changed.any(axis=0), len(self.depths) - 1 - np.argmax(changed[::-1], axis=0), -1
        )
        return np.array(self.depths)[last_change + 1]


def windows_of(sequences: list[ScoredSequence], window: int) -> list[Window]:
    return [
        Window(i, start, min(start + window, len(s.inputs)))
        for i, s in enumerate(sequences)
        for start in range(0, len(s.inputs), window)
    ]


def _batches(windows: list[Window], width: int, vocab: int) -> list[list[int]]:
    """Window indices in groups whose logits fit LOGITS_PER_BATCH at one depth."""
    rows = max(1, LOGITS_PER_BATCH // (width * vocab))
    return [list(range(i, min(i + rows, len(windows)))) for i in range(0, len(windows), rows)]


def _padded(
    sequences: list[ScoredSequence], windows: list[Window], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, W) inputs and targets of the windows, right-padded (the model is causal, so padding
    after a position changes nothing at it); padded targets are not scored."""
    width = max(w.end - w.start for w in windows)
    inputs = torch.zeros(len(windows), width, dtype=torch.long)
    targets = torch.full((len(windows), width), IGNORE_INDEX, dtype=torch.long)
    for row, w in enumerate(windows):
        s = sequences[w.sequence]
        inputs[row, : w.end - w.start] = torch.tensor(s.inputs[w.start : w.end])
        targets[row, : w.end - w.start] = torch.tensor(s.targets[w.start : w.end])
    return inputs.to(device), targets.to(device)


def _scores(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Per position: the target's NLL (NaN where not scored), the top token, its probability."""
    nll = next_token_loss(logits, targets, reduction="none").view(targets.shape)
    nll = nll.masked_fill(targets == IGNORE_INDEX, float("nan"))
    top_logprob, top = torch.log_softmax(logits.float(), dim=-1).max(dim=-1)
    return nll, top, top_logprob.exp()


def _unpad(values: torch.Tensor, windows: list[Window]) -> list[np.ndarray]:
    return [values[row, : w.end - w.start].cpu().numpy() for row, w in enumerate(windows)]


@torch.no_grad()
def inspect_sequences(
    model: LoopedDecoder,
    sequences: list[ScoredSequence],
    depths: list[int],
    modes: list[Adaptive],
    cache: CacheStrategy = FULL_CACHE,
    dtype: torch.dtype = torch.float32,
) -> Inspection:
    """Score every position of `sequences` at every one of `depths` through the `cache` strategy
    (our model: one pass of the recurrence per window where it keeps every iteration; another
    looped model: one decoding step of each window per depth through a fresh cache) and in every
    adaptive mode (whose max_depth should not pass max(depths), for the page to show it; only
    our model reads out between passes)."""
    depths = sorted(set(depths))
    ours = model if isinstance(model, LoopedTransformer) else None
    if modes:
        ours = with_readout_per_pass(model, modes[0].describe())
    one_pass = [d for d in depths if ours is not None and cache.keeps_every_iteration(d)]
    device = model_device(model)
    windows = windows_of(sequences, model.max_seq_len)
    width = max(w.end - w.start for w in windows)
    per_depth: dict[int, tuple[list, list, list]] = {d: ([], [], []) for d in depths}
    per_rule: list[tuple[list, list, list]] = [([], [], []) for _ in modes]
    was_training = model.training
    model.train(False)
    try:
        for group in _batches(windows, width, model.vocab_size):
            batch = [windows[i] for i in group]
            inputs, targets = _padded(sequences, batch, device)
            prefill = 0 if ours is not None else inputs.shape[1]  # theirs: a window per step
            with autocast(device, dtype):
                through_cache = (
                    (
                        d,
                        teacher_forced(model, inputs, FixedDepth(d, cache_strategy=cache), prefill)[
                            0
                        ],
                    )
                    for d in depths
                    if d not in one_pass
                )
                in_one_pass = ours.logits_by_depth(inputs, one_pass) if ours and one_pass else ()
                for depth, logits in itertools.chain(in_one_pass, through_cache):
                    scores = _scores(logits, targets)
                    for into, values in zip(per_depth[depth], scores, strict=True):
                        into.extend(_unpad(values, batch))
                for parts, mode in zip(per_rule, modes, strict=True):
                    logits, stopped = teacher_forced(model, inputs, mode)
                    nll, top, _ = _scores(logits, targets)
                    for part, values in zip(parts, (stopped, nll, top), strict=True):
                        part.extend(_unpad(values, batch))
    finally:
        model.train(was_training)

    def stacked(parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(parts)

    return Inspection(
        sequences=sequences,
        depths=depths,
        windows=windows,
        nll=np.stack([stacked(per_depth[d][0]) for d in depths]).astype(np.float64),
        top=np.stack([stacked(per_depth[d][1]) for d in depths]),
        top_probability=np.stack([stacked(per_depth[d][2]) for d in depths]).astype(np.float64),
        rules=[
            RuleStops(mode.rule, stacked(d), stacked(n).astype(np.float64), stacked(t))
            for mode, (d, n, t) in zip(modes, per_rule, strict=True)
        ],
    )
