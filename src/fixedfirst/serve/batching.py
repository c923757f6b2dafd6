"""Prompts of different lengths decoded as one batch: left padding, and text out per prompt.

On a CPU a decoding step of a small model is mostly fixed cost per operation (hundreds of small
kernels per token at depth 16), so one step for eight sequences costs little more than one step
for one: a batch is the cheapest way to serve several prompts (benchmarks/serving.py measures
it). Prompts are left-padded to a common length, so that every row's next token is the batch's
next column; the cache gives each row its own positions and masks its pad columns
(model/kv_cache.py), so each row decodes exactly as it would alone (a test holds a padded batch to
the rows decoded one by one). A row that has ended (its end-of-document token) keeps decoding
with the others until every row has ended or the budget is spent: its tokens are dropped, and it
costs a row's share of each step (at fixed depth the step's matmuls grow with the rows; under an
exit rule a row that stops iterating early costs no further iterations, serve/adaptive.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from fixedfirst.errors import UserError
from fixedfirst.runs.served import Served
from fixedfirst.serve.decoding import decode_steps
from fixedfirst.serve.generation import IncrementalDecoder, prompt_ids
from fixedfirst.serve.modes import DecodingMode
from fixedfirst.serve.speculative import SpeculationStats


def left_pad(rows: Sequence[Sequence[int]], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) ids with row b's tokens at its right end, and (B,) the pad columns of each row;
    T is the longest row's length. The pad id is never seen by a real position."""
    if not rows or min(len(r) for r in rows) == 0:
        raise UserError("every prompt of a batch needs at least one token")
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for b, row in enumerate(rows):
        ids[b, width - len(row) :] = torch.tensor(list(row), dtype=torch.long)
    pad = torch.tensor([width - len(r) for r in rows], dtype=torch.long)
    return ids, pad


@dataclass
class Completion:
    """What one prompt of a batch generated."""

    prompt: str
    text: str = ""
    tokens: list[int] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    """The depth each token's distribution was read out at."""


def generate_batch(
    served: Served,
    prompts: Sequence[str],
    max_new_tokens: int,
    mode: DecodingMode,
    stats: SpeculationStats | None = None,
) -> list[Completion]:
    """Decode every prompt in one padded batch in `mode` (a speculated one fills `stats`); each
    row stops at its end-of-document token or after max_new_tokens. Greedy rows equal what each
    prompt generates alone; sampled rows share one random stream, so they differ from
    single-prompt sampling with the same seed."""
    if max_new_tokens < 1:
        raise UserError(f"--max-new-tokens must be >= 1, got {max_new_tokens}")
    tokenizer = served.tokenizer
    if tokenizer is None:
        raise UserError("this model has no tokenizer")
    rows = [prompt_ids(served, p) for p in prompts]
    window = served.model.max_seq_len
    longest = max(len(r) for r in rows)
    if longest + max_new_tokens > window:
        raise UserError(
            f"the longest prompt ({longest} tokens) + --max-new-tokens {max_new_tokens} exceeds "
            f"model.max_seq_len = {window}; at most {max(0, window - longest)} new tokens fit"
        )
    device = next(served.model.parameters()).device
    ids, pad = left_pad(rows)
    ids, pad = ids.to(device), pad.to(device)
    steps = decode_steps(served.model, ids, max_new_tokens, mode, pad, stats)
    completions = [Completion(p) for p in prompts]
    decoders = [IncrementalDecoder(tokenizer) for _ in prompts]
    ended = [False] * len(prompts)
    for tokens, depths in steps:
        for b, (token, used) in enumerate(zip(tokens[:, 0].tolist(), depths.tolist(), strict=True)):
            if ended[b]:
                continue
            if token == tokenizer.stop_id:
                ended[b] = True
                continue
            done = completions[b]
            done.tokens.append(token)
            done.depths.append(used)
            done.text += decoders[b].push(token)
        if all(ended):
            break
    return completions
