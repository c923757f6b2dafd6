"""Log-likelihood of continuations given contexts, batched, in a decoding mode: a fixed depth or an
exit rule, through a cache strategy.

This is what multiple-choice evaluation asks of a language model: for each (context,
continuation) pair of token ids, log p(continuation | context) and whether greedy decoding would
have produced the continuation. At a fixed depth every pair is one decoding step of
`context + continuation[:-1]` (the last continuation token is only a target) through a fresh
cache, what a forward of the sequence computes, for any looped model serving decodes
(model/serving.py), many pairs to a batch, longest first so that a batch pads little. A pair
longer than the model's window loses tokens from the left of its context, the tokens the
continuation depends on least; a continuation that alone exceeds the window cannot be scored
whole and is refused.

Under an exit rule, with a prefill depth other than the decoding depth, or through a cache that
does not keep every iteration, the positions that predict the continuation are decoded one at a
time as generation would decode them, one pair at a time (`serve.decoding.teacher_forced`); the
context before its last token is prefilled in one pass, exactly as a prompt is in generation.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from fixedfirst.errors import UserError
from fixedfirst.model.serving import LoopedDecoder, model_device
from fixedfirst.serve.decoding import teacher_forced
from fixedfirst.serve.modes import Adaptive, FixedDepth

Pair = tuple[Sequence[int], Sequence[int]]
"""(context ids, continuation ids); the context is not empty."""


def model_inputs(pair: Pair, window: int) -> tuple[list[int], list[int]]:
    """The ids fed to the model (context + continuation[:-1], left-truncated to `window`) and
    the continuation, predicted by the last len(continuation) of them."""
    context, continuation = list(pair[0]), list(pair[1])
    if not context:
        raise ValueError("the context must hold at least one token (start of document)")
    if len(continuation) > window:
        raise UserError(
            f"a continuation of {len(continuation)} tokens does not fit the model's window of "
            f"{window} tokens"
        )
    return (context + continuation)[:-1][-window:], continuation


@torch.no_grad()
def score_pairs(
    model: LoopedDecoder,
    pairs: Sequence[Pair],
    mode: FixedDepth | Adaptive,
    batch_size: int = 16,
) -> list[tuple[float, bool]]:
    """(log-likelihood of the continuation, is it the greedy continuation) for every pair,
    decoded in `mode`."""
    if batch_size < 1:
        raise UserError(f"batch size must be >= 1, got {batch_size}")
    window = model.max_seq_len
    device = model_device(model)
    prepared = [model_inputs(pair, window) for pair in pairs]
    results: list[tuple[float, bool]] = [(0.0, True)] * len(prepared)
    if not _one_step(mode):
        for i, (inputs, continuation) in enumerate(prepared):
            if continuation:
                tokens = torch.tensor([inputs], device=device)
                prefill = len(inputs) - len(continuation)
                logits, _ = teacher_forced(model, tokens, mode, prefill)
                results[i] = _continuation_score(logits[0, prefill:], continuation)
        return results
    assert isinstance(mode, FixedDepth)
    order = sorted(
        (i for i, (_, c) in enumerate(prepared) if c), key=lambda i: -len(prepared[i][0])
    )
    for b in range(0, len(order), batch_size):
        batch = order[b : b + batch_size]
        width = len(prepared[batch[0]][0])
        tokens = torch.zeros(len(batch), width, dtype=torch.long)
        for row, i in enumerate(batch):
            inputs = prepared[i][0]
            tokens[row, : len(inputs)] = torch.tensor(inputs)
        # One step through a fresh cache; right padding is causal, so it changes nothing.
        cache = model.new_cache(mode.depth, strategy=mode.cache_strategy)
        logits = model.decode_step(tokens.to(device), mode.depth, cache)
        for row, i in enumerate(batch):
            inputs, continuation = prepared[i]
            end = len(inputs)
            results[i] = _continuation_score(
                logits[row, end - len(continuation) : end], continuation
            )
    return results


def _one_step(mode: FixedDepth | Adaptive) -> bool:
    """Whether a pair's positions may all be decoded in one step: one fixed depth for context
    and continuation, through a cache that keeps every iteration (docs/design.md §19)."""
    return (
        isinstance(mode, FixedDepth)
        and mode.prompt_depth == mode.depth
        and mode.cache_strategy.keeps_every_iteration(mode.depth)
    )


def _continuation_score(logits: torch.Tensor, continuation: list[int]) -> tuple[float, bool]:
    """logits (n, V) of the n positions that predict the n continuation tokens."""
    target = torch.tensor(continuation, device=logits.device)
    logprobs = F.log_softmax(logits.float(), dim=-1)
    total = logprobs.gather(1, target[:, None]).sum().item()
    greedy = bool((logits.argmax(dim=-1) == target).all())
    return total, greedy


def rolling_pairs(ids: Sequence[int], window: int) -> list[Pair]:
    """Split a document `ids` (starting with the start-of-document id, which is not scored) into
    pairs that score every other token exactly once, each with as much context as fits: the
    harness's rolling log-likelihood. Windows of `window` targets; the context of each window is
    the `window` tokens (at most) before its last target."""
    pairs: list[Pair] = []
    for first in range(1, len(ids), window):
        end = min(first + window, len(ids))
        start = max(0, end - 1 - window)
        pairs.append((list(ids[start:first]), list(ids[first:end])))
    return pairs
