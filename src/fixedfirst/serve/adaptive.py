"""Per-token adaptive depth: stop iterating the core once the next-token distribution settles.

A looped model can spend more iterations on hard tokens and fewer on easy ones (Geiping et al.
2025, "Huginn", zero-shot adaptive compute). The exit rule, for each new token:

    after core iteration k = 1, 2, ..., read out p_k, the next-token distribution at depth k;
    stop at the first k with KL(p_{k-1} || p_k) < threshold, or at k = max_depth.

p_0 is the uniform distribution, as in Huginn, so a token stops after one iteration only when its
first distribution is already that close to uniform. The KL is clamped at zero (rounding can make
the KL of two equal distributions -1e-9), so a threshold of 0 never stops early and reproduces
fixed-depth decoding at max_depth exactly. Huginn's default threshold is 1e-3 (`KLExit`).

What later tokens see. Every later token attends, at core iteration j, to the keys and values
that each earlier position produced at iteration j. A position that stopped at depth k < j never
computed iteration j, so its entry for j is a copy of its entry at iteration k (its last computed
iteration, per core layer): the state it stopped in is what it shows to the deeper iterations of
later tokens. This is Huginn's `latest` cache lookup with its block-per-iteration structure made
explicit. The coda keeps one entry per position, from the readout at the depth it stopped at.

Cost. The rule needs the distribution at every iteration, so each iteration also pays the readout
(coda layers + the d x vocab head + a log-softmax): a token that stops at depth k costs
prelude + k * (iteration + readout), against prelude + K * iteration + readout at fixed depth K.
With the paper-200m preset (4 core layers, 1 coda layer, d = 1024, 32k vocabulary,
1024-token sequences) a readout costs about 0.8 of a core iteration, so KL exit at mean depth k
costs like fixed depth ~1.8 k; the CPU model of configs/sweeps/lm-cpu.toml (2 core layers, byte
vocabulary) pays ~0.5 of an iteration per readout. In a trained model a token practically never
stops at depth 1 (its first distribution is far from uniform): the effective minimum is 2.
`compute.flop_model` gives the exact numbers; benchmarks/generation.py reports them.

Prefill. In generation the prompt, except its last token, is processed at max_depth in one
batched pass: its tokens are given, so there is nothing to decide, and every cache entry exists.
The last prompt token goes through the rule, so every generated token's distribution is one the
rule chose. Teacher-forced scoring (`teacher_forced_kl_exit`) applies the rule at every position.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fixedfirst.errors import UserError
from fixedfirst.model import KVCache, LoopedTransformer, check_depth, sample_next

DEFAULT_THRESHOLD = 1e-3
"""Huginn's KL threshold."""


@dataclass(frozen=True)
class KLExit:
    """The exit rule: stop when KL(previous || current) < threshold, at max_depth at the latest."""

    threshold: float = DEFAULT_THRESHOLD
    max_depth: int = 16

    def __post_init__(self) -> None:
        t = self.threshold
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise UserError(f"the KL threshold must be a finite number >= 0, got {t!r}")
        check_depth(self.max_depth)

    def describe(self) -> str:
        return f"KL exit (threshold {self.threshold:g}, max depth {self.max_depth})"


@dataclass
class AdaptiveStep:
    """One position decoded under the exit rule."""

    logits: torch.Tensor
    """(B, V) next-token logits, each row read out at the depth it stopped at."""
    depths: torch.Tensor
    """(B,) the depth each row stopped at."""


def kl_divergence(prev_logprobs: torch.Tensor, logprobs: torch.Tensor) -> torch.Tensor:
    """KL(prev || current) per row of (B, V) log-probabilities, clamped at 0."""
    return (prev_logprobs.exp() * (prev_logprobs - logprobs)).sum(-1).clamp_min(0.0)


@torch.no_grad()
def adaptive_step(
    model: LoopedTransformer, tokens: torch.Tensor, cache: KVCache, rule: KLExit
) -> AdaptiveStep:
    """Process one new position per row (tokens (B, 1)) after what `cache` holds.

    Rows stop independently. While some rows still iterate, the core also runs for rows that
    stopped (batched), and their entries for those iterations are overwritten with copies of the
    entry they stopped at, so batch rows never change each other's results.
    """
    if tokens.dim() != 2 or tokens.shape[1] != 1:
        raise ValueError(
            f"adaptive_step takes one position per row, got shape {tuple(tokens.shape)}"
        )
    B, start = tokens.shape[0], cache.length
    for j in (0, rule.max_depth - 1):
        if cache.layer("core", j, 0).length != start:
            raise ValueError(
                f"the cache holds {start} positions but not at every iteration up to max_depth "
                f"{rule.max_depth}: build it with this rule (or decode_step at max_depth)"
            )
    e = model._prelude(tokens, cache)
    state = model._initial_state(e, start, deterministic=True)
    injection = model._injection(e)
    coda = [cache.layer("coda", i) for i in range(model.config.n_coda)]
    depths = torch.zeros(B, dtype=torch.long, device=tokens.device)
    kept_logits: torch.Tensor | None = None
    kept_coda: list[tuple[torch.Tensor, torch.Tensor]] = []
    vocab = model.config.vocab_size
    prev = torch.full((B, vocab), -math.log(vocab), device=tokens.device)
    for k in range(1, rule.max_depth + 1):
        state = model._iteration(state, injection, k - 1, cache)
        logits = model._readout(state, cache)[:, -1]
        logprobs = F.log_softmax(logits.float(), dim=-1)
        stop = kl_divergence(prev, logprobs) < rule.threshold
        if k == rule.max_depth:
            stop = torch.ones_like(stop)
        new = stop & (depths == 0)
        depths[new] = k
        kept_logits = (
            logits.clone()
            if kept_logits is None
            else torch.where(new[:, None], logits, kept_logits)
        )
        for i, layer in enumerate(coda):  # this readout's coda entries: kept for rows that stop
            assert layer.keys is not None and layer.values is not None
            k_new, v_new = layer.keys[..., start:, :], layer.values[..., start:, :]
            if i == len(kept_coda):
                kept_coda.append((k_new.clone(), v_new.clone()))
            else:
                row = new[:, None, None, None]
                kept_coda[i] = (
                    torch.where(row, k_new, kept_coda[i][0]),
                    torch.where(row, v_new, kept_coda[i][1]),
                )
            layer.truncate(start)
        if bool((depths > 0).all()):
            break
        prev = logprobs
    _fill_deeper_iterations(model, cache, depths, start, rule.max_depth)
    for layer, (keys, values) in zip(coda, kept_coda, strict=True):
        layer.append(keys, values)
    cache.length += 1
    assert kept_logits is not None
    return AdaptiveStep(kept_logits, depths)


def _fill_deeper_iterations(
    model: LoopedTransformer, cache: KVCache, depths: torch.Tensor, start: int, max_depth: int
) -> None:
    """Give position `start` an entry at every iteration up to max_depth: a row that stopped at
    depth d shows its iteration-d keys/values at every deeper iteration j > d."""
    row_depths = depths.tolist()
    stopped_at = sorted(set(row_depths))
    for layer_index in range(model.config.n_core):
        source = {d: cache.layer("core", d - 1, layer_index) for d in stopped_at}
        for j in range(stopped_at[0] + 1, max_depth + 1):
            target = cache.layer("core", j - 1, layer_index)
            if target.length == start:  # no row computed iteration j: every row copies
                if len(stopped_at) == 1:
                    entry = source[stopped_at[0]]
                    assert entry.keys is not None and entry.values is not None
                    target.append(entry.keys[..., start:, :], entry.values[..., start:, :])
                    continue
                first = source[stopped_at[0]]
                assert first.keys is not None and first.values is not None
                target.append(
                    torch.empty_like(first.keys[..., start:, :]),
                    torch.empty_like(first.values[..., start:, :]),
                )
            assert target.keys is not None and target.values is not None
            for d in stopped_at:
                if d >= j:
                    break
                rows = depths == d
                entry = source[d]
                assert entry.keys is not None and entry.values is not None
                target.keys[rows, :, start] = entry.keys[rows, :, start]
                target.values[rows, :, start] = entry.values[rows, :, start]


def check_prompt(model: LoopedTransformer, prompt: torch.Tensor, max_new_tokens: int) -> None:
    if prompt.dim() != 2 or prompt.shape[1] == 0:
        raise UserError("prompt must be a (batch, length) tensor with length >= 1")
    total = prompt.shape[1] + max_new_tokens
    if total > model.config.max_seq_len:
        raise UserError(
            f"prompt + new tokens = {total} exceeds model.max_seq_len = {model.config.max_seq_len}"
        )


@torch.no_grad()
def stream_kl_exit(
    model: LoopedTransformer,
    prompt: torch.Tensor,
    max_new_tokens: int,
    rule: KLExit,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield (next token (B, 1), depth used for it (B,)) one at a time, with a KV cache."""
    check_prompt(model, prompt, max_new_tokens)
    cache = KVCache()
    if prompt.shape[1] > 1:
        model.decode_step(prompt[:, :-1], rule.max_depth, cache)
    step = adaptive_step(model, prompt[:, -1:], cache, rule)
    for n in range(max_new_tokens):
        token = sample_next(step.logits, temperature, generator)
        yield token, step.depths
        if n + 1 < max_new_tokens:
            step = adaptive_step(model, token, cache, rule)


@torch.no_grad()
def teacher_forced_kl_exit(
    model: LoopedTransformer, tokens: torch.Tensor, rule: KLExit, prefill: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next-token logits (B, T, V) and depths (B, T) when every position of `tokens` (B, T) is
    decoded under the rule, as generation would if it had produced exactly these tokens.

    The first `prefill` positions are processed at max_depth in one pass (depth max_depth), as a
    prompt is in generation. Sequential in T: one `adaptive_step` per position.
    """
    B, T = tokens.shape
    if not 0 <= prefill <= T:
        raise ValueError(f"prefill {prefill} outside 0..{T}")
    cache = KVCache()
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
