"""Depth-speculative decoding: the model's own shallow depth drafts, its serving depth verifies.

A model trained fixed-first serves well at every depth, so depth D < K is a free draft model for
depth K. Each round drafts N tokens at depth D, verifies them in one pass of iterations D+1..K
(reusing the draft's first D iterations, which are exactly the verifier's), keeps the longest
agreeing prefix plus depth K's next token, and truncates the cache back to the kept inputs: the
output is greedy decoding at K, token for token. Rows of a batch advance by their own agreement,
hiding their rejected columns (`KVCache.hide`). Both the reuse and the one-pass verification need
every iteration's entries up to K, so speculation takes the full cache (or bounded with S >= K)
and refuses the other strategies. docs/design.md §13 gives the rounds, the reuse and the costs,
§19 the strategies.

Any other looped model (a transformers one) speculates through its decoding steps alone
(`stream_redrafted`): the drafts are decoded at D, rolled back, and the chunk is verified in one
step at K from the first pass up, since its forward cannot start from a pass; a batch keeps its
rows' shortest agreement, since a rejected draft's column cannot be hidden from a short
convolution that has already read it.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

import torch

from fixedfirst.model import KVCache, LoopedTransformer
from fixedfirst.model.serving import DecodingCache, LoopedDecoder, check_prompt
from fixedfirst.serve.modes import Speculated


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
    dropped: int = 0
    """Agreeing drafts dropped in rows that agreed more than the batch's worst row that round
    (a model without hidden columns: `stream_redrafted`)."""
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
def agreed_drafts(chunk: torch.Tensor, verified: torch.Tensor) -> torch.Tensor:
    """Per row, how many of the drafts `chunk[:, 1:]` the verifying depth agrees with before its
    first disagreement (`verified[:, i]` is its next token after `chunk[:, i]`): only an
    agreeing prefix is what greedy decoding at that depth would have produced."""
    n = chunk.shape[1] - 1
    return (chunk[:, 1:] == verified[:, :n]).long().cumprod(1).sum(1)


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
    model: LoopedDecoder,
    prompt: torch.Tensor,
    max_new_tokens: int,
    mode: Speculated,
    pad: torch.Tensor | None = None,
    stats: SpeculationStats | None = None,
    reuse: bool = True,
) -> Generator[torch.Tensor, None, DecodingCache]:
    """Yield the next token (B, 1) one at a time: greedy decoding at `mode.depth`, drafted
    `mode.draft_tokens` at a time at `mode.draft_depth` and verified; the tokens are those of
    `FixedDepth(mode.depth, cache_strategy=mode.cache_strategy)`. Returns, when done, the cache
    it decoded into (a row leaves it once its tokens are all decided). pad: as in
    `model.stream`. stats: filled in as decoding goes. reuse: the verifier starts from the
    draft's iterations (False: it recomputes them; the same tokens, more work). A model other
    than ours decodes as `stream_redrafted` (its verifier always recomputes)."""
    if not isinstance(model, LoopedTransformer):
        stats = stats if stats is not None else SpeculationStats()
        return (yield from stream_redrafted(model, prompt, max_new_tokens, mode, pad, stats))
    check_prompt(model, prompt, max_new_tokens)
    depth, draft_depth, draft_tokens = mode.depth, mode.draft_depth, mode.draft_tokens
    stats = stats if stats is not None else SpeculationStats()
    cache = KVCache(pad, mode.cache_strategy)
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
            return cache
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
    agree = agreed_drafts(chunk, verified)  # (R,)
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


@torch.no_grad()
def stream_redrafted(
    model: LoopedDecoder,
    prompt: torch.Tensor,
    max_new_tokens: int,
    mode: Speculated,
    pad: torch.Tensor | None,
    stats: SpeculationStats,
) -> Generator[torch.Tensor, None, DecodingCache]:
    """Depth-speculative greedy decoding through decoding steps alone: each round decodes N
    drafts at the draft depth (their steps leave their entries for the deeper passes, the cache's
    rule), rolls the cache back to the round's start, runs the last token and the drafts in one
    step at the serving depth, and keeps the longest prefix of drafts that every row's verifier
    agrees with plus the verifier's next token. The tokens are `FixedDepth(mode.depth)`'s."""
    check_prompt(model, prompt, max_new_tokens)
    depth, draft_depth = mode.depth, mode.draft_depth
    batch = prompt.shape[0]
    cache = model.new_cache(depth, pad, mode.cache_strategy, rollback=True)
    token = model.decode_step(prompt, depth, cache)[:, -1].argmax(-1, keepdim=True)
    cache.truncate(cache.length)  # what rollback recorded of the prompt is not needed
    yield token
    emitted = 1
    stats.emitted += batch
    while emitted < max_new_tokens:
        n = min(mode.draft_tokens, max_new_tokens - emitted - 1)
        start = cache.length
        inputs = [token]
        for _ in range(n):
            drafted = model.decode_step(inputs[-1], draft_depth, cache)[:, -1]
            inputs.append(drafted.argmax(-1, keepdim=True))
        cache.truncate(start)
        chunk = torch.cat(inputs, 1)  # (B, n + 1): the last token and the n drafts
        verified = model.decode_step(chunk, depth, cache).argmax(-1)  # (B, n + 1)
        agree = agreed_drafts(chunk, verified)  # (B,)
        kept = int(agree.min())
        cache.truncate(start + kept + 1)
        stats.rounds += int(n > 0)
        stats.drafted += n * batch
        stats.agreed += int(agree.sum())
        stats.dropped += int((agree - kept).sum())
        stats.emitted += (kept + 1) * batch
        stats.draft_iterations += draft_depth * n * batch
        stats.verified_iterations += depth * chunk.numel()
        for i in range(kept + 1):
            yield verified[:, i : i + 1]
        token = verified[:, kept : kept + 1]
        emitted += kept + 1
    return cache
