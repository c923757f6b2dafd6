"""The decoding mode as one typed value, validated when it is made, and what decodes with it.

    FixedDepth(depth, sampling, cache)                    every token at `depth`
    Speculated(depth, draft_depth, draft_tokens, cache)   greedy at `depth`, drafted at draft_depth
    Adaptive(rule, sampling, cache)                       each token until `rule` says it settled

Each mode carries its cache strategy (model/kv_cache.py) and, where it samples, its `Sampling`.
A combination that cannot decode does not construct: a draft not below the serving depth, a
speculation with a temperature (`Speculated` has no sampling: it is greedy), a speculation over a
cache that does not keep every iteration (docs/design.md §19). The command line builds one mode
from its flags (`decoding_mode` in cli/generate_cmd.py); everything below takes it as it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from fixedfirst.config.limits import MAX_SEED
from fixedfirst.errors import UserError
from fixedfirst.model import FULL_CACHE, CacheStrategy, KVCache, LoopedTransformer, check_depth
from fixedfirst.serve.adaptive import stream_adaptive, teacher_forced_exit
from fixedfirst.serve.exit_rules import ExitRule
from fixedfirst.serve.speculative import (
    DEFAULT_DRAFT_TOKENS,
    SpeculationStats,
    check_speculation,
    stream_speculative,
)

MIN_TEMPERATURE, MAX_TEMPERATURE = 1e-4, 100.0
"""Sampling temperatures: below 1e-4 the scaled logits overflow float32 (use 0 for greedy);
above 100 every token is about equally likely."""


def check_sampling(temperature: float, seed: int) -> None:
    """Refuse a temperature or seed that torch would choke on, before anything is loaded."""
    if not (temperature == 0 or MIN_TEMPERATURE <= temperature <= MAX_TEMPERATURE):
        raise UserError(
            f"--temperature must be 0 (greedy) or in [{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}], "
            f"got {temperature}"
        )
    if not 0 <= seed <= MAX_SEED:
        raise UserError(f"--seed must be in [0, 2**63 - 1], got {seed}")


@dataclass(frozen=True)
class Sampling:
    """Temperature 0 is greedy (argmax); above it, a softmax sample from a generator seeded
    with `seed`."""

    temperature: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        check_sampling(self.temperature, self.seed)

    def generator(self, device: torch.device) -> torch.Generator:
        return torch.Generator(device=device).manual_seed(self.seed)


GREEDY = Sampling()


@dataclass(frozen=True)
class FixedDepth:
    """Every token runs `depth` core iterations."""

    depth: int
    sampling: Sampling = GREEDY
    cache: CacheStrategy = FULL_CACHE

    def __post_init__(self) -> None:
        check_depth(self.depth)

    @property
    def max_depth(self) -> int:
        return self.depth

    def describe(self) -> str:
        return f"depth {self.depth}"


@dataclass(frozen=True)
class Speculated:
    """Greedy decoding at `depth`, `draft_tokens` drafted per round at `draft_depth` and
    verified: the tokens of FixedDepth(depth, cache=cache), fewer iterations."""

    depth: int
    draft_depth: int
    draft_tokens: int = DEFAULT_DRAFT_TOKENS
    cache: CacheStrategy = FULL_CACHE
    sampling: Sampling = field(default=GREEDY, init=False)

    def __post_init__(self) -> None:
        check_speculation(self.depth, self.draft_depth, self.draft_tokens, self.cache)

    @property
    def max_depth(self) -> int:
        return self.depth

    def describe(self) -> str:
        return (
            f"depth {self.depth}, speculating {self.draft_tokens} tokens at depth "
            f"{self.draft_depth}"
        )


@dataclass(frozen=True)
class Adaptive:
    """Each token stops where its exit rule says, at `rule.max_depth` at the latest."""

    rule: ExitRule
    sampling: Sampling = GREEDY
    cache: CacheStrategy = FULL_CACHE

    @property
    def max_depth(self) -> int:
        return self.rule.max_depth

    def describe(self) -> str:
        return self.rule.describe()


DecodingMode = FixedDepth | Speculated | Adaptive


def parse_speculate(text: str) -> tuple[int, int]:
    """'2' or '2:8' (`--speculate DRAFT_DEPTH[:N_TOKENS]`) -> (draft depth, draft tokens)."""
    parts = text.split(":")
    try:
        if len(parts) > 2:
            raise ValueError
        values = [int(p) for p in parts]
    except ValueError:
        raise UserError(
            f"--speculate {text!r}: expected DRAFT_DEPTH[:N_TOKENS], e.g. 2 or 2:8"
        ) from None
    draft_tokens = values[1] if len(values) == 2 else DEFAULT_DRAFT_TOKENS
    return values[0], draft_tokens


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
    generator = mode.sampling.generator(ids.device)
    temperature = mode.sampling.temperature
    match mode:
        case Adaptive(rule=rule, cache=cache):
            yield from stream_adaptive(
                model, ids, max_new_tokens, rule, temperature, generator, pad, cache
            )
            return
        case Speculated(depth=depth, draft_depth=draft, draft_tokens=n, cache=cache):
            tokens = stream_speculative(
                model,
                ids,
                max_new_tokens,
                depth,
                draft,
                n,
                pad=pad,
                stats=stats,
                cache_strategy=cache,
            )
        case FixedDepth(depth=depth, cache=cache):
            tokens = model.stream(ids, max_new_tokens, depth, temperature, generator, pad, cache)
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
        return teacher_forced_exit(model, tokens, mode.rule, prefill, mode.cache)
    B, T = tokens.shape
    if not 0 <= prefill <= T:
        raise ValueError(f"prefill {prefill} outside 0..{T}")
    cache = KVCache(strategy=mode.cache)
    logits = []
    if prefill:
        logits.append(model.decode_step(tokens[:, :prefill], mode.depth, cache))
    for t in range(prefill, T):
        logits.append(model.decode_step(tokens[:, t : t + 1], mode.depth, cache))
    depths = torch.full((B, T), mode.depth, dtype=torch.long, device=tokens.device)
    return torch.cat(logits, dim=1), depths
