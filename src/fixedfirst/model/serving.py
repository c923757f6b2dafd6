"""What serving needs of a looped model, declared once: ours and a transformers looped
architecture both provide it, and serve/ decodes either without knowing which.

    max_seq_len, vocab_size       the window and the token ids
    new_cache(max_depth, pad, strategy, rollback)
                                  a cache for steps at any depth up to max_depth: a token decoded
                                  shallower shows later, deeper tokens its last pass's entries
                                  at the passes it did not run (docs/design.md §1, §19)
    decode_step(tokens, depth, cache)
                                  the next tokens' logits after what the cache holds, at `depth`
    readout_between_passes        None when the model reads out after any pass (ours: `encode`,
                                  `iterate`, `readout`), which the exit rules, the exit frontier
                                  and depth-speculation's reuse of the draft's passes need; else
                                  why it has none

Fixed-depth decoding, prefill and decode at their own depths, depth changes between tokens and
depth-speculative decoding need only the first three. `with_readout_per_pass` is the one place a
use that needs the fourth refuses a model without it, in one line that says why.
"""

from __future__ import annotations

from typing import Protocol

import torch

from fixedfirst.config.architectures import looped_architecture
from fixedfirst.errors import UserError
from fixedfirst.model.kv_cache import FULL_CACHE, CacheStrategy
from fixedfirst.model.looped import LoopedTransformer


class DecodingCache(Protocol):
    """A decoding session's cache, as serve/ handles it."""

    length: int
    """Columns held (padding included)."""

    def truncate(self, length: int) -> None:
        """Forget every column from `length` on (a rejected draft)."""
        ...


class LoopedDecoder(Protocol):
    """A looped model served by depth (module docstring)."""

    vocab_size: int

    @property
    def max_seq_len(self) -> int: ...

    @property
    def readout_between_passes(self) -> str | None: ...

    def new_cache(
        self,
        max_depth: int | None = None,
        pad: torch.Tensor | None = None,
        strategy: CacheStrategy = FULL_CACHE,
        rollback: bool = False,
    ) -> DecodingCache: ...

    def decode_step(self, tokens: torch.Tensor, depth: int, cache) -> torch.Tensor: ...

    training: bool

    def train(self, mode: bool = True): ...

    def parameters(self, recurse: bool = True): ...


def with_readout_per_pass(model: LoopedDecoder, use: str) -> LoopedTransformer:
    """`model` when it reads out after every pass; else the one-line refusal of `use` (an exit
    rule, the exit frontier), saying why the model has no such readout."""
    if isinstance(model, LoopedTransformer):
        return model
    architecture = getattr(model, "architecture", type(model).__name__)
    raise no_readout_refusal(use, architecture)


def no_readout_refusal(use: str, architecture: str) -> UserError:
    """The refusal of `use` for a transformers looped architecture (config/architectures.py),
    which has no readout between its passes."""
    why = looped_architecture(architecture).no_readout
    return UserError(
        f"{use} reads the prediction out after every loop pass, and transformers' "
        f"{architecture} has no readout between its passes: {why}; serve it at a fixed depth "
        "(--depth, --prefill-depth) or depth-speculated (--speculate)"
    )


def describe(model: LoopedDecoder) -> str:
    """The model, in words: fixedfirst's own looped transformer or transformers' CLASS."""
    architecture = getattr(model, "architecture", None)
    if architecture is not None:
        return f"transformers' {architecture}"
    return "fixedfirst's looped transformer"


def model_device(model: LoopedDecoder) -> torch.device:
    return next(iter(model.parameters())).device


def check_prompt(model: LoopedDecoder, prompt: torch.Tensor, max_new_tokens: int) -> None:
    """Refuse a prompt that is not (batch, length >= 1), or that leaves no room in the model's
    window for `max_new_tokens`."""
    if prompt.dim() != 2 or prompt.shape[1] == 0:
        raise UserError("prompt must be a (batch, length) tensor with length >= 1")
    total = prompt.shape[1] + max_new_tokens
    if total > model.max_seq_len:
        raise UserError(
            f"prompt + new tokens = {total} exceeds model.max_seq_len = {model.max_seq_len}"
        )
