"""A document as a stream of pieces of bounded size, cut where byte-level BPE cuts anyway.

`prepare` never holds a whole document: the tokenizers' memory grows with the text of one call
(BPE encoding keeps about a hundred bytes of bookkeeping per byte of text; docs/guides/
own-data.md quotes benchmarks/prepare_memory.py), so a one-document corpus.txt of a few GB would
need hundreds. Each input reads its text in blocks and `pieces` re-cuts it into pieces of at
most PIECE_CHARS characters, every one tagged with whether it ends its document.

A cut is placed where the GPT-2 pre-tokenizer pattern of byte-level BPE splits the text anyway:
just before whitespace that follows a non-space character. None of the pattern's words reaches
from a non-space character into the whitespace after it, and it matches whitespace looking only
forward, so the pieces' words, the merges BPE learns from them and the tokens it gives them are
the whole document's (tests/test_data_pieces.py checks both against the tokenizer). A stretch of
PIECE_CHARS characters with no such place (minified data, text without spaces) is cut at the
limit, the one case where a token at the cut can differ from the whole document's. The piece
size is a constant, not a setting, so what `prepare` writes never depends on how much memory it
was given.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import NamedTuple

PIECE_CHARS = 1 << 16
_SAFE_CUT = re.compile(r"(?<=\S)(?=\s)")
"""A cut before whitespace that follows a non-space character."""


class Piece(NamedTuple):
    text: str
    last: bool
    """The document's last piece: its end-of-document token follows."""


def cut_at(text: str, limit: int) -> int:
    """Where to end the first piece of `text` (longer than `limit`): the last safe place at
    most `limit` characters in (looked for in the last quarter first), else `limit`."""
    for start in (limit - limit // 4, 1):
        safe = [m.start() for m in _SAFE_CUT.finditer(text, start, limit + 1)]
        if safe:
            return safe[-1]
    return limit


def pieces(blocks: Iterable[str], limit: int = PIECE_CHARS) -> Iterator[Piece]:
    """One document's text, given in `blocks` of any size, as pieces of at most `limit`
    characters. Nothing when the text is only whitespace (a blank document is skipped): the
    pieces before its first non-space character are held back until one comes."""
    held: list[str] = []
    size = 0
    blank = True
    ready: str | None = None  # a full piece, given out once we know whether another follows
    for block in blocks:
        held.append(block)
        size += len(block)
        blank = blank and not block.strip()
        while size > limit and not blank:
            text = "".join(held)
            cut = cut_at(text, limit)
            if ready is not None:
                yield Piece(ready, False)
            ready = text[:cut]
            held, size = [text[cut:]], len(text) - cut
    if blank:
        return
    rest = "".join(held)
    if ready is not None:
        yield Piece(ready, not rest)
    if rest:
        yield Piece(rest, True)
