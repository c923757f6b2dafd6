"""Depth-speculative decoding: the model's own shallow depth drafts, its serving depth verifies.

A model trained fixed-first serves well at every depth, so depth D < K is a free draft model for
depth K. Each round (greedy, docs/design.md §13):

    draft   from the next token x, run N + 1 tokens through the prelude and D core iterations,
            one at a time: x, then y_1..y_N, each y_i the argmax of a readout at depth D (the
            last token, y_N, is iterated but not read out);
    verify  run the N + 1 tokens through iterations D+1..K and a readout in ONE pass (causal
            within the chunk), giving depth K's argmax z_i after each of them;
    accept  the longest prefix with y_i = z_i (a of N), then z_{a+1}: a + 1 tokens per round,
            exactly those greedy decoding at depth K would produce.

Reuse. Iteration j of a token reads only the iteration-j keys and values of earlier tokens (and
its own state after iteration j - 1), so a token's first D iterations are the same whether the
depth-D draft or the depth-K verifier runs them, as long as earlier tokens are the same: the
verifier starts from the draft's states after D iterations and from its cache entries for
iterations 1..D, and computes only iterations D+1..K. Without reuse (`reuse=False`, kept for the
benchmark) the verifier recomputes the chunk from the prelude up. The draft's readouts see the
coda entries of accepted tokens at depth K and of earlier draft tokens at depth D; the verifier
discards the draft's coda entries and writes its own.

Rollback. After a round, positions whose input was a rejected draft token (y_{a+1}..y_N) are
removed from every layer application's cache (`KVCache.truncate`); every entry kept was computed
from accepted tokens only (causality), so the cache is exactly what plain decoding at depth K
would hold. The next round drafts from z_{a+1}.

Batches decode in lock step: a round keeps the shortest accepted prefix over the rows (rows that
agreed further redraft those tokens next round, and get the same tokens, since draft and verifier
are deterministic), so the cache stays one length for every row. `SpeculationStats` counts the
per-row agreement (the draft's quality) and what the batch kept.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from fixedfirst.errors import UserError
from fixedfirst.model import KVCache, LoopedTransformer, check_depth
from fixedfirst.serve.adaptive import check_prompt

DEFAULT_DRAFT_TOKENS = 4


def check_speculation(depth: int, draft_depth: int, draft_tokens: int) -> None:
    check_depth(depth)
    check_depth(draft_depth)
    if isinstance(draft_tokens, bool) or not isinstance(draft_tokens, int) or draft_tokens < 1:
        raise UserError(f"the number of draft tokens must be an integer >= 1, got {draft_tokens}")
    if draft_depth >= depth:
        raise UserError(
            f"the draft depth must be below the serving depth, got draft depth {draft_depth} "
            f"and serving depth {depth}"
        )


@dataclass(frozen=True)
class Speculation:
    """Draft `draft_tokens` tokens per round at `draft_depth` (`--speculate D[:N]`)."""

    draft_depth: int
    draft_tokens: int = DEFAULT_DRAFT_TOKENS

    def __post_init__(self) -> None:
        check_speculation(self.draft_depth + 1, self.draft_depth, self.draft_tokens)

    @classmethod
    def parse(cls, text: str) -> Speculation:
        """'2' or '2:8' (DRAFT_DEPTH[:N_TOKENS]), checked; errors name the flag."""
        parts = text.split(":")
        try:
            if len(parts) > 2:
                raise ValueError
            values = [int(p) for p in parts]
        except ValueError:
            raise UserError(
                f"--speculate {text!r}: expected DRAFT_DEPTH[:N_TOKENS], e.g. 2 or 2:8"
            ) from None
        try:
            return cls(*values)
        except UserError as e:
            raise UserError(f"--speculate {text}: {e}") from None

    def check(self, depth: int) -> None:
        """Refuse a draft depth that is not below the serving depth."""
        try:
            check_speculation(depth, self.draft_depth, self.draft_tokens)
        except UserError as e:
            raise UserError(f"--speculate {self.draft_depth}:{self.draft_tokens}: {e}") from None

    def describe(self) -> str:
        return f"speculating {self.draft_tokens} tokens at depth {self.draft_depth}"


@dataclass
class SpeculationStats:
    """What depth-speculative decoding did, summed over rounds (and rows)."""

    rounds: int = 0
    drafted: int = 0
    """Draft tokens proposed, summed over rows."""
    agreed: int = 0
    """Draft tokens that matched the verifier before their row's first mismatch, summed over
    rows."""
    kept: int = 0
    """Draft tokens kept (each round: the shortest agreement over the rows), summed over rows."""
    emitted: int = 0
    """Tokens produced per row (the prefill's first token and plain steps included)."""
    reused_iterations: int = 0
    """Token-iterations of the core (per row) the verifier took from the draft."""
    verified_iterations: int = 0
    """Token-iterations the verifier ran itself (per row)."""
    draft_iterations: int = 0
    """Token-iterations the draft ran (per row; the reused ones among them)."""

    @property
    def acceptance_rate(self) -> float:
        """The share of draft tokens the verifier agreed with (per row)."""
        return self.agreed / self.drafted if self.drafted else float("nan")

    @property
    def kept_rate(self) -> float:
        return self.kept / self.drafted if self.drafted else float("nan")


@torch.no_grad()
def _draft(
    model: LoopedTransformer, token: torch.Tensor, cache: KVCache, depth: int, n: int
) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """Run `token` and n greedy draft tokens through the prelude and `depth` iterations, one at
    a time; return the n + 1 inputs, their states (B, n + 1, d) and injections."""
    inputs, states, injections = [token], [], []
    for i in range(n + 1):
        positions = cache.positions(1)
        e = model._prelude(inputs[-1], cache)
        state = model._initial_state(e, cache.length, deterministic=True, positions=positions)
        injection = model._injection(e)
        for j in range(depth):
            state = model._iteration(state, injection, j, cache)
        states.append(state)
        injections.append(injection)
        if i < n:
            logits = model._readout(state, cache)[:, -1]
            inputs.append(logits.argmax(-1, keepdim=True))
        cache.length += 1
    return inputs, torch.cat(states, 1), torch.cat(injections, 1)


@torch.no_grad()
def stream_speculative(
    model: LoopedTransformer,
    prompt: torch.Tensor,
    max_new_tokens: int,
    depth: int,
    draft_depth: int,
    draft_tokens: int = DEFAULT_DRAFT_TOKENS,
    pad: torch.Tensor | None = None,
    reuse: bool = True,
    stats: SpeculationStats | None = None,
    cache: KVCache | None = None,
) -> Iterator[torch.Tensor]:
    """Yield the next token (B, 1) one at a time: greedy decoding at `depth`, drafted
    `draft_tokens` at a time at `draft_depth` and verified; the tokens equal
    `model.stream(prompt, max_new_tokens, depth)`'s. pad: as in `model.stream`. stats: filled
    in as decoding goes. cache: an empty KVCache(pad) to decode into, to inspect afterwards."""
    check_speculation(depth, draft_depth, draft_tokens)
    check_prompt(model, prompt, max_new_tokens)
    stats = stats if stats is not None else SpeculationStats()
    cache = cache if cache is not None else KVCache(pad)
    token = model.decode_step(prompt, depth, cache)[:, -1].argmax(-1, keepdim=True)
    stats.emitted += 1
    yield token
    emitted = 1
    while emitted < max_new_tokens:
        n = min(draft_tokens, max_new_tokens - emitted - 1)
        if n == 0:  # one token left: a plain step
            token = model.decode_step(token, depth, cache)[:, -1].argmax(-1, keepdim=True)
            stats.emitted += 1
            emitted += 1
            yield token
            continue
        start = cache.length
        inputs, states, injections = _draft(model, token, cache, draft_depth, n)
        chunk = torch.cat(inputs, 1)  # (B, n + 1): the token and the n drafts
        if reuse:
            for i in range(model.config.n_coda):  # the draft's readouts are not kept
                cache.layer("coda", i).truncate(start)
            for j in range(draft_depth, depth):
                states = model._iteration(states, injections, j, cache)
            logits = model._readout(states, cache)
            stats.reused_iterations += draft_depth * (n + 1)
            stats.verified_iterations += (depth - draft_depth) * (n + 1)
        else:
            cache.truncate(start)
            logits = model.decode_step(chunk, depth, cache)
            stats.verified_iterations += depth * (n + 1)
        cache.length = start + n + 1
        stats.draft_iterations += draft_depth * (n + 1)
        verified = logits.argmax(-1)  # (B, n + 1): depth K's next token after each input
        agree = (chunk[:, 1:] == verified[:, :n]).long().cumprod(1).sum(1)  # (B,)
        kept = int(agree.min())
        cache.truncate(start + kept + 1)  # roll back the inputs after the kept drafts
        stats.rounds += 1
        stats.drafted += n * chunk.shape[0]
        stats.agreed += int(agree.sum())
        stats.kept += kept * chunk.shape[0]
        stats.emitted += kept + 1
        for i in range(kept + 1):
            emitted += 1
            yield verified[:, i : i + 1]
        token = verified[:, kept : kept + 1]
