"""The decoding mode as one typed value, validated when it is made.

    FixedDepth(depth, sampling, prefill_depth)      every token at `depth`, the prompt at
                                                    prefill_depth (default: `depth` too)
    Speculated(depth, draft_depth, draft_tokens)    greedy at `depth`, drafted at draft_depth
    Adaptive(rule, sampling)                        each token until `rule` says it settled

Each mode also carries its `cache_strategy` (model/kv_cache.py); `Speculated` has no sampling
(it is greedy). A combination that cannot decode does not construct: a draft not below the
serving depth, a speculation over a cache that does not keep every iteration
(docs/design.md §19). The command line builds one mode from its flags (cli/generate_cmd.py);
the streaming functions and serve/decoding.py take it as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fixedfirst.config.limits import MAX_SEED
from fixedfirst.errors import UserError
from fixedfirst.model import FULL_CACHE, CacheStrategy, check_depth
from fixedfirst.serve.exit_rules import ExitRule

MIN_TEMPERATURE, MAX_TEMPERATURE = 1e-4, 100.0
"""Sampling temperatures: below 1e-4 the scaled logits overflow float32 (use 0 for greedy);
above 100 every token is about equally likely."""
DEFAULT_DRAFT_TOKENS = 4


def check_sampling(temperature: float, seed: int) -> None:
    """Refuse a temperature or seed that torch would choke on, before anything is loaded."""
    if not (temperature == 0 or MIN_TEMPERATURE <= temperature <= MAX_TEMPERATURE):
        raise UserError(
            f"--temperature must be 0 (greedy) or in [{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}], "
            f"got {temperature}"
        )
    if not 0 <= seed <= MAX_SEED:
        raise UserError(f"--seed must be in [0, 2**63 - 1], got {seed}")


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
    """Every generated token runs `depth` loop passes; the prompt runs `prefill_depth` (None:
    `depth` too). The cache is built for `cache_depth` (None: the deeper of the two), so that
    the prompt's depth and the tokens' may differ (docs/design.md §19)."""

    depth: int
    sampling: Sampling = GREEDY
    cache_strategy: CacheStrategy = FULL_CACHE
    prefill_depth: int | None = None
    cache_depth: int | None = None

    def __post_init__(self) -> None:
        check_depth(self.depth)
        if self.prefill_depth is not None:
            check_depth(self.prefill_depth, "the prefill depth")
        if self.cache_depth is not None:
            check_depth(self.cache_depth, "the cache depth")
            deepest = max(self.depth, self.prompt_depth)
            if deepest > self.cache_depth:
                raise UserError(
                    f"depth {deepest} is beyond the depth {self.cache_depth} the cache is built "
                    f"for (--cache-depth {self.cache_depth}): give --cache-depth >= {deepest}, "
                    "or leave it out (the cache is then built for the deepest depth decoded)"
                )

    @property
    def prompt_depth(self) -> int:
        """The depth the prompt is prefilled at."""
        return self.depth if self.prefill_depth is None else self.prefill_depth

    @property
    def max_depth(self) -> int:
        """The deepest depth the cache holds entries for."""
        return self.cache_depth or max(self.depth, self.prompt_depth)

    def describe(self) -> str:
        if self.prompt_depth == self.depth:
            return f"depth {self.depth}"
        return f"prefill at depth {self.prompt_depth}, decode at depth {self.depth}"


@dataclass(frozen=True)
class Speculated:
    """Greedy decoding at `depth`, `draft_tokens` drafted per round at `draft_depth` and
    verified: the tokens of FixedDepth(depth, cache_strategy=cache_strategy), fewer iterations."""

    depth: int
    draft_depth: int
    draft_tokens: int = DEFAULT_DRAFT_TOKENS
    cache_strategy: CacheStrategy = FULL_CACHE
    sampling: Sampling = field(default=GREEDY, init=False)

    def __post_init__(self) -> None:
        check_speculation(self.depth, self.draft_depth, self.draft_tokens, self.cache_strategy)

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
    cache_strategy: CacheStrategy = FULL_CACHE

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
