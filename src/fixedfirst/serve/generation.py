"""Text in, text out: generation from a served model in a decoding mode (serve/decoding.py: a
fixed depth, depth-speculated, or under an exit rule).

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

from fixedfirst.data.tokenizer import Tokenizer
from fixedfirst.errors import UserError
from fixedfirst.runs.served import Served
from fixedfirst.serve.decoding import decode_steps
from fixedfirst.serve.modes import DecodingMode
from fixedfirst.serve.speculative import SpeculationStats


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


def prompt_ids(served: Served, prompt: str) -> list[int]:
    """Start-of-document, then the prompt's tokens."""
    if served.tokenizer is None:
        raise UserError("this model has no tokenizer")
    check_utf8(prompt)
    return [served.tokenizer.start_id, *served.tokenizer.encode(prompt)]


def room_after(served: Served, prompt: str) -> int:
    """How many new tokens fit the model's window after `prompt` (may be <= 0)."""
    return served.model.max_seq_len - len(prompt_ids(served, prompt))


def encode_prompt(served: Served, prompt: str, max_new_tokens: int) -> torch.Tensor:
    """(1, T) ids: start-of-document, then the prompt; checked against the model's window."""
    if max_new_tokens < 1:
        raise UserError(f"--max-new-tokens must be >= 1, got {max_new_tokens}")
    ids = prompt_ids(served, prompt)
    window = served.model.max_seq_len
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


def generate_text(
    served: Served,
    prompt: str,
    max_new_tokens: int,
    mode: DecodingMode,
    stats: SpeculationStats | None = None,
) -> Iterator[GeneratedToken]:
    """Yield each generated token with its text and depth, decoded in `mode` (a speculated one
    fills `stats`). Stops after max_new_tokens or at the end-of-document token."""
    ids = encode_prompt(served, prompt, max_new_tokens)
    assert served.tokenizer is not None
    steps = decode_steps(served.model, ids, max_new_tokens, mode, None, stats)
    decoder = IncrementalDecoder(served.tokenizer)
    for token, depths in steps:
        token_id, used = int(token[0, 0]), int(depths[0])
        if token_id == served.tokenizer.stop_id:
            break
        yield GeneratedToken(decoder.push(token_id), token_id, used)
