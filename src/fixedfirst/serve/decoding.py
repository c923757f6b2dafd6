"""What decodes with a decoding mode (serve/modes.py): step by step as generation does, or
teacher-forced through the mode's cache as scoring does, for any looped model that serving can
decode (`LoopedDecoder`, model/serving.py). A mode that reads out after every pass (an exit rule)
takes fixedfirst's own model and refuses another in one line."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from fixedfirst.model import sample_next
from fixedfirst.model.serving import LoopedDecoder, check_prompt, with_readout_per_pass
from fixedfirst.serve.adaptive import stream_adaptive, teacher_forced_exit
from fixedfirst.serve.modes import Adaptive, DecodingMode, FixedDepth, Speculated
from fixedfirst.serve.speculative import SpeculationStats, stream_speculative


def decode_steps(
    model: LoopedDecoder,
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
            own = with_readout_per_pass(model, mode.describe())
            yield from stream_adaptive(own, ids, max_new_tokens, mode, pad)
            return
        case Speculated():
            tokens = stream_speculative(model, ids, max_new_tokens, mode, pad, stats)
        case FixedDepth():
            tokens = stream_fixed(model, ids, max_new_tokens, mode, pad)
    used = torch.full((ids.shape[0],), mode.depth)
    for token in tokens:
        yield token, used


@torch.no_grad()
def stream_fixed(
    model: LoopedDecoder,
    prompt: torch.Tensor,
    max_new_tokens: int,
    mode: FixedDepth,
    pad: torch.Tensor | None = None,
) -> Iterator[torch.Tensor]:
    """Yield the next token (B, 1) one at a time: the prompt in one step at the mode's prefill
    depth, every new token at its decode depth, through one cache built for the deeper of the
    two (or the mode's cache depth). pad: (B,) leading pad columns of a left-padded prompt."""
    check_prompt(model, prompt, max_new_tokens)
    generator = mode.sampling.generator(prompt.device)
    cache = model.new_cache(mode.max_depth, pad, mode.cache_strategy)
    logits = model.decode_step(prompt, mode.prompt_depth, cache)
    for n in range(max_new_tokens):
        token = sample_next(logits[:, -1], mode.sampling.temperature, generator)
        yield token
        if n + 1 < max_new_tokens:
            logits = model.decode_step(token, mode.depth, cache)


@torch.no_grad()
def teacher_forced(
    model: LoopedDecoder, tokens: torch.Tensor, mode: FixedDepth | Adaptive, prefill: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Next-token logits (B, T, V) and the depth each was read out at (B, T) when `tokens`
    (B, T) are decoded through the mode's cache one position at a time, as generation would if
    it had produced exactly these tokens; the first `prefill` positions in one step at the
    mode's prefill depth (a prompt). Under the full cache at one fixed depth this equals one
    forward of the whole sequence."""
    if isinstance(mode, Adaptive):
        own = with_readout_per_pass(model, mode.describe())
        return teacher_forced_exit(own, tokens, mode, prefill)
    B, T = tokens.shape
    if not 0 <= prefill <= T:
        raise ValueError(f"prefill {prefill} outside 0..{T}")
    cache = model.new_cache(mode.max_depth, strategy=mode.cache_strategy)
    logits = []
    depths = torch.full((B, T), mode.depth, dtype=torch.long, device=tokens.device)
    if prefill:
        logits.append(model.decode_step(tokens[:, :prefill], mode.prompt_depth, cache))
        depths[:, :prefill] = mode.prompt_depth
    for t in range(prefill, T):
        logits.append(model.decode_step(tokens[:, t : t + 1], mode.depth, cache))
    return torch.cat(logits, dim=1), depths
