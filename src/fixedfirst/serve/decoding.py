"""What decodes with a decoding mode (serve/modes.py): step by step as generation does, or
teacher-forced through the mode's cache as scoring does."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from fixedfirst.model import KVCache, LoopedTransformer
from fixedfirst.serve.adaptive import stream_adaptive, teacher_forced_exit
from fixedfirst.serve.modes import Adaptive, DecodingMode, FixedDepth, Speculated
from fixedfirst.serve.speculative import SpeculationStats, stream_speculative


def decode_steps(
    model: LoopedTransformer,
    ids: torch.Tensor,
    max_new_tokens: int,
    mode: DecodingMode,
    pad: torch.Tensor | None = None,
    stats: SpeculationStats | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(next tokens (B, 1), depth each was read out at (B,)) one step at a time; `stats` is
    filled by a speculated mode."""
    tokens: Iterator[torch.Tensor]
    match mode:
        case Adaptive():
            yield from stream_adaptive(model, ids, max_new_tokens, mode, pad)
            return
        case Speculated():
            tokens = stream_speculative(model, ids, max_new_tokens, mode, pad, stats)
        case FixedDepth(depth=depth, sampling=sampling, cache_strategy=cache_strategy):
            generator = sampling.generator(ids.device)
            tokens = model.stream(
                ids, max_new_tokens, depth, sampling.temperature, generator, pad, cache_strategy
            )
    used = torch.full((ids.shape[0],), mode.max_depth)
    for token in tokens:
        yield token, used


@torch.no_grad()
def teacher_forced(
    model: LoopedTransformer, tokens: torch.Tensor, mode: FixedDepth | Adaptive, prefill: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next-token logits (B, T, V) and the depth each was read out at (B, T) when `tokens`
    (B, T) are decoded through the mode's cache one position at a time, as generation would if
    it had produced exactly these tokens; the first `prefill` positions in one pass (a prompt).
    Under the full cache at fixed depth this equals one forward of the whole sequence."""
    if isinstance(mode, Adaptive):
        return teacher_forced_exit(model, tokens, mode, prefill)
    B, T = tokens.shape
    if not 0 <= prefill <= T:
        raise ValueError(f"prefill {prefill} outside 0..{T}")
    cache = KVCache(strategy=mode.cache_strategy)
    logits = []
    if prefill:
        logits.append(model.decode_step(tokens[:, :prefill], mode.depth, cache))
    for t in range(prefill, T):
        logits.append(model.decode_step(tokens[:, t : t + 1], mode.depth, cache))
    depths = torch.full((B, T), mode.depth, dtype=torch.long, device=tokens.device)
    return torch.cat(logits, dim=1), depths
