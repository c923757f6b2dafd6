"""Text in, text out: generation from a served model at a fixed depth (plain or depth-speculated)
or under an exit rule.

Every prompt starts with the tokenizer's start-of-document id (training documents all follow
one), and generation stops at its end-of-document id, which is not shown. Text is yielded token by
token as it becomes printable: a byte-level model may emit the bytes of one character over
several tokens, and those are held back until the character is complete (a character still
incomplete when generation ends is not shown).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from fixedfirst.config.limits import MAX_SEED
from fixedfirst.data.tokenizer import Tokenizer
from fixedfirst.errors import UserError
from fixedfirst.model import LoopedTransformer
from fixedfirst.serve.adaptive import stream_adaptive
from fixedfirst.serve.exit_rules import ExitRule
from fixedfirst.serve.loading import Served
from fixedfirst.serve.speculative import Speculation, SpeculationStats, stream_speculative


class IncrementalDecoder:
    """Turns ids, one at a time, into the text they complete."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.shown = 0

    def push(self, token: int) -> str:
        """The new printable text after `token` ('' while a character is incomplete)."""
        self.ids.append(token)
        stable = self.tokenizer.decode(self.ids).rstrip("\ufffd")
        piece = stable[self.shown :]
        self.shown = max(self.shown, len(stable))
        return piece


@dataclass
class GeneratedToken:
    text: str
    """The text this token completes; may be ''."""
    token: int
    depth: int
    """The depth whose distribution this token was drawn from."""


def check_utf8(prompt: str) -> None:
    """Refuse text that has no UTF-8 encoding: bytes of a command-line argument that were not
    UTF-8 arrive as lone surrogates (Python's surrogateescape), which no tokenizer can encode."""
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as e:
        code = ord(prompt[e.start])
        what = (
            f"the byte 0x{code - 0xDC00:02x}"
            if 0xDC80 <= code <= 0xDCFF
            else f"U+{code:04X} (a lone surrogate)"
        )
        raise UserError(
            f"--prompt is not valid UTF-8: character {e.start + 1} is {what}; "
            "give the prompt as UTF-8 text"
        ) from None


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


def prompt_ids(served: Served, prompt: str) -> list[int]:
    """Start-of-document, then the prompt's tokens."""
    if served.tokenizer is None:
        raise UserError("this model has no tokenizer")
    check_utf8(prompt)
    return [served.tokenizer.start_id, *served.tokenizer.encode(prompt)]


def room_after(served: Served, prompt: str) -> int:
    """How many new tokens fit the model's window after `prompt` (may be <= 0)."""
    return served.model.config.max_seq_len - len(prompt_ids(served, prompt))


def encode_prompt(served: Served, prompt: str, max_new_tokens: int) -> torch.Tensor:
    """(1, T) ids: start-of-document, then the prompt; checked against the model's window."""
    if max_new_tokens < 1:
        raise UserError(f"--max-new-tokens must be >= 1, got {max_new_tokens}")
    ids = prompt_ids(served, prompt)
    window = served.model.config.max_seq_len
    if len(ids) > window:
        raise UserError(
            f"the prompt is {len(ids)} tokens (with the start-of-document token), longer than "
            f"model.max_seq_len = {window}"
        )
    if len(ids) + max_new_tokens > window:
        raise UserError(
            f"prompt ({len(ids)} tokens) + --max-new-tokens {max_new_tokens} exceeds "
            f"model.max_seq_len = {window}; at most {window - len(ids)} new tokens fit"
        )
    device = next(served.model.parameters()).device
    return torch.tensor([ids], device=device)


def decode_steps(
    model: LoopedTransformer,
    ids: torch.Tensor,
    max_new_tokens: int,
    depth: int | None = None,
    rule: ExitRule | None = None,
    temperature: float = 0.0,
    seed: int = 0,
    speculation: Speculation | None = None,
    pad: torch.Tensor | None = None,
    stats: SpeculationStats | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(next tokens (B, 1), depth each was read out at (B,)) one step at a time: at fixed
    `depth` (speculated when `speculation` is given: the same greedy tokens, faster), or under
    `rule` (exactly one of depth and rule)."""
    if (depth is None) == (rule is None):
        raise ValueError("give exactly one of depth and rule")
    if speculation is not None and (rule is not None or temperature != 0):
        raise ValueError("speculation decodes greedily at a fixed depth")
    generator = torch.Generator(device=ids.device).manual_seed(seed)
    if rule is not None:
        yield from stream_adaptive(model, ids, max_new_tokens, rule, temperature, generator, pad)
        return
    assert depth is not None
    used = torch.full((ids.shape[0],), depth)
    if speculation is not None:
        tokens = stream_speculative(
            model,
            ids,
            max_new_tokens,
            depth,
            speculation.draft_depth,
            speculation.draft_tokens,
            pad=pad,
            stats=stats,
        )
    else:
        tokens = model.stream(ids, max_new_tokens, depth, temperature, generator, pad)
    for token in tokens:
        yield token, used


def generate_text(
    served: Served,
    prompt: str,
    max_new_tokens: int,
    depth: int | None = None,
    rule: ExitRule | None = None,
    temperature: float = 0.0,
    seed: int = 0,
    speculation: Speculation | None = None,
    stats: SpeculationStats | None = None,
) -> Iterator[GeneratedToken]:
    """Yield each generated token with its text and depth: at fixed `depth` (depth-speculated
    with `speculation`, filling `stats`), or under `rule` (exactly one of depth and rule).
    Stops after max_new_tokens or at the end-of-document token."""
    check_sampling(temperature, seed)
    ids = encode_prompt(served, prompt, max_new_tokens)
    assert served.tokenizer is not None
    steps = decode_steps(
        served.model, ids, max_new_tokens, depth, rule, temperature, seed, speculation, None, stats
    )
    decoder = IncrementalDecoder(served.tokenizer)
    for token, depths in steps:
        token_id, used = int(token[0, 0]), int(depths[0])
        if token_id == served.tokenizer.stop_id:
            break
        yield GeneratedToken(decoder.push(token_id), token_id, used)
