"""Per-token adaptive depth: stop iterating the core once an exit rule says the token settled.

A looped model can spend more iterations on hard tokens and fewer on easy ones (Huginn). After
each core iteration an exit rule (`exit_rules.py`) decides per row whether the token stops;
later tokens see a stopped position's last computed iteration at every deeper one (§1), and under
a bounded cache the deepest it wrote in each slot (§19). A row that stopped costs no further
iterations: each runs on the rows still iterating (`RowSubset`), and the stopped rows' cache
entries are filled in at the end. The prompt but its last token is prefilled at max_depth.
docs/design.md §11-12 gives the cache rules and the costs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fixedfirst.model import KVCache, LoopedTransformer, sample_next
from fixedfirst.model.kv_cache import RowSubset
from fixedfirst.model.serving import check_prompt
from fixedfirst.serve.exit_rules import ExitRule, KLExit, kl_divergence
from fixedfirst.serve.modes import Adaptive

DEFAULT_THRESHOLD = KLExit.threshold
"""Huginn's KL threshold."""

__all__ = [
    "DEFAULT_THRESHOLD",
    "AdaptiveStep",
    "KLExit",
    "adaptive_step",
    "kl_divergence",
    "stream_adaptive",
    "stream_kl_exit",
    "teacher_forced_exit",
    "teacher_forced_kl_exit",
]


@dataclass
class AdaptiveStep:
    """One position decoded under the exit rule."""

    logits: torch.Tensor
    """(B, V) next-token logits, each row read out at the depth it stopped at."""
    depths: torch.Tensor
    """(B,) the depth each row stopped at."""


class _Kept:
    """Per row, what the readout at the row's stopping depth produced: its logits and its coda
    entries (the coda is read out again at every iteration and only the kept one stays)."""

    def __init__(self, batch: int) -> None:
        self.batch = batch
        self.logits: torch.Tensor | None = None
        self.coda: list[tuple[torch.Tensor, torch.Tensor]] = []

    def keep(self, rows: torch.Tensor, logits: torch.Tensor, coda: list, start: int) -> None:
        if self.logits is None:
            self.logits = logits.new_empty((self.batch, logits.shape[-1]))
        self.logits[rows] = logits
        for i, layer in enumerate(coda):
            keys, values = layer.keys[rows, :, start:], layer.values[rows, :, start:]
            if i == len(self.coda):
                self.coda.append(
                    (
                        keys.new_empty((self.batch, *keys.shape[1:])),
                        values.new_empty((self.batch, *values.shape[1:])),
                    )
                )
            self.coda[i][0][rows] = keys
            self.coda[i][1][rows] = values


@torch.no_grad()
def adaptive_step(
    model: LoopedTransformer, tokens: torch.Tensor, cache: KVCache, rule: ExitRule
) -> AdaptiveStep:
    """Process one new position per row (tokens (B, 1)) after what `cache` holds.

    Rows stop independently; an iteration runs on the rows still iterating only, and the rows
    that stopped get copies of the entry they stopped at, so batch rows never change each
    other's results.
    """
    if tokens.dim() != 2 or tokens.shape[1] != 1:
        raise ValueError(
            f"adaptive_step takes one position per row, got shape {tuple(tokens.shape)}"
        )
    B, start = tokens.shape[0], cache.length
    for j in (0, cache.strategy.slots(rule.max_depth) - 1):
        if cache.layer("core", j, 0).columns != start:
            raise ValueError(
                f"the cache holds {start} positions but not at every iteration up to max_depth "
                f"{rule.max_depth}: build it with this rule (or decode_step at max_depth)"
            )
    positions = cache.positions(1)
    e = model.encode(tokens, cache)
    state = model.initial_state(e, start, deterministic=True, positions=positions)
    injection = model.injection(e)
    tracker = rule.tracker(state[:, -1], model.config.vocab_size)
    coda = [cache.layer("coda", i) for i in range(model.config.n_coda)]
    depths = torch.zeros(B, dtype=torch.long, device=tokens.device)
    kept = _Kept(B)
    rows = torch.arange(B, device=tokens.device)
    for k in range(1, rule.max_depth + 1):
        whole = rows.numel() == B
        view = cache if whole else RowSubset(cache, rows, B)
        active = model.iterate(
            state if whole else state[rows], injection if whole else injection[rows], k - 1, view
        )
        logprobs = None
        if rule.reads_out:
            logits = model.readout(active, view)[:, -1]
            logprobs = F.log_softmax(logits.float(), dim=-1)
        stop = tracker.update(rows, active[:, -1], logprobs)
        if k == rule.max_depth:
            stop = torch.ones_like(stop)
        if bool(stop.any()):
            stopping = rows[stop]
            if not rule.reads_out:  # read out the stopping rows only
                everyone = stopping.numel() == B
                readout_view = cache if everyone else RowSubset(cache, stopping, B)
                logits = model.readout(active[stop], readout_view)[:, -1]
            else:
                logits = logits[stop]
            kept.keep(stopping, logits, coda, start)
            depths[stopping] = k
        if rule.reads_out or bool(stop.any()):
            for layer in coda:
                layer.truncate(start)
        if bool(stop.all()):
            break
        if whole:
            state = active
        else:  # state is an earlier iteration's output here (k > 1), ours to write into
            state[rows] = active
        rows = rows[~stop]
    cache.fill_unreached_slots(depths, start, rule.max_depth, model.config.n_core)
    for layer, (keys, values) in zip(coda, kept.coda, strict=True):
        layer.append(keys, values)
    cache.length += 1
    assert kept.logits is not None
    return AdaptiveStep(kept.logits, depths)


@torch.no_grad()
def stream_adaptive(
    model: LoopedTransformer,
    prompt: torch.Tensor,
    max_new_tokens: int,
    mode: Adaptive,
    pad: torch.Tensor | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield (next token (B, 1), depth used for it (B,)) one at a time, each token stopped by
    `mode.rule` and sampled as `mode.sampling` says, with a KV cache that keeps what
    `mode.cache_strategy` says.

    pad: (B,) leading pad columns of each row of a left-padded prompt (serve/batching.py)."""
    check_prompt(model, prompt, max_new_tokens)
    rule, generator = mode.rule, mode.sampling.generator(prompt.device)
    cache = KVCache(pad, mode.cache_strategy, rule.max_depth)
    if prompt.shape[1] > 1:
        model.decode_step(prompt[:, :-1], rule.max_depth, cache)
    step = adaptive_step(model, prompt[:, -1:], cache, rule)
    for n in range(max_new_tokens):
        token = sample_next(step.logits, mode.sampling.temperature, generator)
        yield token, step.depths
        if n + 1 < max_new_tokens:
            step = adaptive_step(model, token, cache, rule)


@torch.no_grad()
def teacher_forced_exit(
    model: LoopedTransformer, tokens: torch.Tensor, mode: Adaptive, prefill: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next-token logits (B, T, V) and depths (B, T) when every position of `tokens` (B, T) is
    decoded under `mode.rule` through its cache, as generation would if it had produced exactly
    these tokens (the mode's sampling plays no part).

    The first `prefill` positions are processed at max_depth in one pass (depth max_depth), as a
    prompt is in generation. Sequential in T: one `adaptive_step` per position.
    """
    B, T = tokens.shape
    if not 0 <= prefill <= T:
        raise ValueError(f"prefill {prefill} outside 0..{T}")
    rule = mode.rule
    cache = KVCache(strategy=mode.cache_strategy, max_depth=rule.max_depth)
    logits, depths = [], []
    if prefill:
        logits.append(model.decode_step(tokens[:, :prefill], rule.max_depth, cache))
        depths.append(
            torch.full((B, prefill), rule.max_depth, dtype=torch.long, device=tokens.device)
        )
    for t in range(prefill, T):
        step = adaptive_step(model, tokens[:, t : t + 1], cache, rule)
        logits.append(step.logits[:, None])
        depths.append(step.depths[:, None])
    return torch.cat(logits, dim=1), torch.cat(depths, dim=1)


# KL-named aliases, for callers that name the rule in the function; they take any rule's mode.
stream_kl_exit = stream_adaptive
teacher_forced_kl_exit = teacher_forced_exit
