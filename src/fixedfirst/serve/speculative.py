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

Cache strategies. Both the reuse and the one-pass verification rest on iteration j reading the
iteration-j entries of earlier tokens, whatever depth those tokens run to. A bounded cache with
fewer slots than the serving depth breaks both: a slot holds an earlier token's deepest write, so
what a drafted token reads depends on how deep the tokens before it went, and inside the
verifier's chunk those deeper writes do not exist yet. Speculation therefore takes a strategy
that keeps every iteration up to the serving depth (the full cache, or bounded with S >= K) and
refuses the others (docs/design.md §17).

Batches. Rows agree with their verifier for different lengths. A round keeps the inputs up to
the longest agreement over the rows, and a row that agreed less hides the columns of its
rejected inputs from every later query (`KVCache.hide`, the mechanism of left padding: the
row's positions count only its visible columns), so every row advances by its own agreement
plus one. Rows that have all their tokens leave the batch and the cache (`select_rows`); the
others go on. `SpeculationStats` counts drafts, agreement and hidden columns.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from fixedfirst.errors import UserError
from fixedfirst.model import FULL_CACHE, CacheStrategy, KVCache, LoopedTransformer, check_depth
from fixedfirst.serve.adaptive import check_prompt

DEFAULT_DRAFT_TOKENS = 4


def check_speculation(
    depth: int, draft_depth: int, draft_tokens: int, cache_strategy: CacheStrategy = FULL_CACHE
) -> None:
    """Refuse a draft that is not below the serving depth, a draft of no tokens, and a cache
    strategy that does not keep every iteration up to the serving depth."""
    check_depth(depth)
    check_depth(draft_depth, "the draft depth")
    if isinstance(draft_tokens, bool) or not isinstance(draft_tokens, int) or draft_tokens < 1:
        raise UserError(f"the number of draft tokens must be an integer >= 1, got {draft_tokens}")
    if draft_depth >= depth:
        raise UserError(
            f"the draft depth must be below the serving depth, got draft depth {draft_depth} "
            f"and serving depth {depth}"
        )
    if not cache_strategy.keeps_every_iteration(depth):
        raise UserError(
            f"depth-speculative decoding needs every iteration's cache entry up to the serving "
            f"depth {depth}, which the {cache_strategy.describe()} does not keep (a slot holds "
            f"an earlier token's deepest write); use --cache full, or bounded:S with S >= {depth}"
        )


@dataclass
class SpeculationStats:
    """What depth-speculative decoding did, summed over rounds and rows."""

    rounds: int = 0
    drafted: int = 0
    """Draft tokens proposed (N per row per round)."""
    agreed: int = 0
    """Draft tokens that matched the verifier before their row's first mismatch."""
    hidden: int = 0
    """Columns hidden in rows that agreed less than the batch's best row that round."""
    emitted: int = 0
    """Tokens produced (the prefill's first token and plain steps included)."""
    reused_iterations: int = 0
    """Token-iterations of the core the verifier took from the draft."""
    verified_iterations: int = 0
    """Token-iterations the verifier ran itself."""
    draft_iterations: int = 0
    """Token-iterations the draft ran (the reused ones among them)."""

    @property
    def acceptance_rate(self) -> float:
        """The share of draft tokens the verifier agreed with."""
        return self.agreed / self.drafted if self.drafted else float("nan")


@torch.no_grad()
def _draft(
    model: LoopedTransformer, token: torch.Tensor, cache: KVCache, depth: int, n: int
) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """Run `token` and n greedy draft tokens through the prelude and `depth` iterations, one at
    a time; return the n + 1 inputs, their states (B, n + 1, d) and injections."""
    inputs, states, injections = [token], [], []
    for i in range(n + 1):
        positions = cache.positions(1)
        e = model.encode(inputs[-1], cache)
        state = model.initial_state(e, cache.length, deterministic=True, positions=positions)
        injection = model.injection(e)
        for j in range(depth):
            state = model.iterate(state, injection, j, cache)
        states.append(state)
        injections.append(injection)
        if i < n:
            logits = model.readout(state, cache)[:, -1]
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
    cache_strategy: CacheStrategy = FULL_CACHE,
) -> Iterator[torch.Tensor]:
    """Yield the next token (B, 1) one at a time: greedy decoding at `depth`, drafted
    `draft_tokens` at a time at `draft_depth` and verified; the tokens equal
    `model.stream(prompt, max_new_tokens, depth, cache_strategy=cache_strategy)`'s. pad: as in
    `model.stream`. stats: filled in as decoding goes. cache: an empty KVCache(pad,
    cache_strategy) to decode into, to inspect afterwards."""
    if cache is not None:
        cache_strategy = cache.strategy
    check_speculation(depth, draft_depth, draft_tokens, cache_strategy)
    check_prompt(model, prompt, max_new_tokens)
    stats = stats if stats is not None else SpeculationStats()
    cache = cache if cache is not None else KVCache(pad, cache_strategy)
    batch = prompt.shape[0]
    out = prompt.new_empty((batch, max_new_tokens))  # each row's tokens, as they are decided
    filled = torch.zeros(batch, dtype=torch.long, device=prompt.device)
    rows = torch.arange(batch, device=prompt.device)  # the rows still decoding
    token = model.decode_step(prompt, depth, cache)[:, -1].argmax(-1, keepdim=True)
    yielded = 0
    out[:, 0] = token[:, 0]
    filled += 1
    stats.emitted += batch
    while True:
        ready = int(filled.min())
        while yielded < ready:  # every row has decided this column
            yield out[:, yielded : yielded + 1]
            yielded += 1
        going = filled[rows] < max_new_tokens
        if not bool(going.any()):
            return
        if not bool(going.all()):  # finished rows leave the batch (and the cache)
            keep = going.nonzero()[:, 0]
            cache.select_rows(keep)
            rows, token = rows[keep], token[keep]
        left = max_new_tokens - filled[rows]
        n = min(draft_tokens, int(left.min()) - 1)
        if n == 0:  # a row has one token left: a plain step
            token = model.decode_step(token, depth, cache)[:, -1].argmax(-1, keepdim=True)
            out[rows, filled[rows]] = token[:, 0]
            filled[rows] += 1
            stats.emitted += rows.numel()
            continue
        decided = _round(model, token, cache, depth, draft_depth, n, reuse, stats)
        for row, tokens in zip(rows.tolist(), decided, strict=True):
            out[row, filled[row] : filled[row] + tokens.numel()] = tokens
            filled[row] += tokens.numel()
        token = torch.stack([t[-1:] for t in decided])


def _round(
    model: LoopedTransformer,
    token: torch.Tensor,
    cache: KVCache,
    depth: int,
    draft_depth: int,
    n: int,
    reuse: bool,
    stats: SpeculationStats,
) -> list[torch.Tensor]:
    """One round of draft, verify, accept and roll back for the rows of `token` (R, 1); returns
    each row's new tokens (its agreeing drafts and depth K's next token)."""
    start = cache.length
    inputs, states, injections = _draft(model, token, cache, draft_depth, n)
    chunk = torch.cat(inputs, 1)  # (R, n + 1): the token and the n drafts
    if reuse:
        for i in range(model.config.n_coda):  # the draft's readouts are not kept
            cache.layer("coda", i).truncate(start)
        for j in range(draft_depth, depth):
            states = model.iterate(states, injections, j, cache)
        logits = model.readout(states, cache)
        stats.reused_iterations += draft_depth * chunk.numel()
        stats.verified_iterations += (depth - draft_depth) * chunk.numel()
    else:
        cache.truncate(start)
        logits = model.decode_step(chunk, depth, cache)
        stats.verified_iterations += depth * chunk.numel()
    cache.length = start + n + 1
    stats.draft_iterations += draft_depth * chunk.numel()
    verified = logits.argmax(-1)  # (R, n + 1): depth K's next token after each input
    agree = (chunk[:, 1:] == verified[:, :n]).long().cumprod(1).sum(1)  # (R,)
    best = int(agree.max())
    cache.truncate(start + best + 1)  # roll back the inputs after every row's kept drafts
    behind = agree < best
    if bool(behind.any()):  # rows that kept fewer hide their rejected inputs' columns
        cache.hide(start + agree + 1, start + best + 1)
        stats.hidden += int((best - agree).sum())
    stats.rounds += 1
    stats.drafted += n * chunk.shape[0]
    stats.agreed += int(agree.sum())
    stats.emitted += int((agree + 1).sum())
    return [verified[r, : int(a) + 1] for r, a in enumerate(agree)]
