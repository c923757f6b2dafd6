"""Which text is held out for validation: whole documents, a fraction of the bytes; or for a
corpus of too few documents, the end of each one.

By documents (the rule): a fraction f holds out f of the text, counted in UTF-8 bytes, in whole
documents. Document i is held out when the text held out so far falls short of f of all the
text before it by more than half a document (half the mean size of the documents so far):

    held out  <=>  f * before_i - held_i > before_i / (2 i)

Whether a document is held out never depends on its own size, so long and short documents are
held out alike (a rule that held out whichever document brought the share nearest f would
rarely pick a long one), and the decision is taken before the document is read, so a document
of any length is streamed (data/pieces.py). After every document the held-out text is within
one document (the largest so far) of f of the text so far, for f up to 1/2: the shortfall grows
by f of each trained document, and each held-out document ends it, overshooting by less than
itself (docs/design.md §4; tests/test_data_split.py checks it after every document). Documents
are spread over the whole corpus (every input contributes), the split needs no random state and
is the same for every tokenizer, so byte-level and BPE data of one corpus hold out the same
text.

Bytes rather than tokens, because a BPE tokenizer is trained on the training text only, so the
split must be known before there are tokens to count. For the byte tokenizer bytes are its
tokens; for BPE the held-out fraction of the tokens differs from that of the bytes by how much
better or worse the held-out text compresses, which `fixedfirst prepare` prints.

Within documents (the fallback): when no document is held out (a handful of files, each one
document, or a fraction too small for the corpus), the last f of every document's bytes (cut
forward to a whitespace) is held out and the rest trains; the validation text is still unseen in
training, though it follows training text of the same document.

Data prepared before this rule (format version 1) held out a fraction of the documents (round
((i + 1) f) > round(i f)), whatever their sizes, and keep that split (data/prepared.py).

The validation fraction itself, when not given, is 1%, raised for a small corpus to
AUTO_MIN_BYTES / its size (at most 10%): what one default evaluation reads (4 batches of 16
sequences of 129 tokens, about 8k tokens) with room to spare.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence

from fixedfirst.data.pieces import Piece

DEFAULT_FRACTION = 0.01
AUTO_MAX_FRACTION = 0.1
AUTO_MIN_BYTES = 16_384
_SPACE = re.compile(r"\s")


def auto_fraction(total_bytes: int | None) -> float:
    """The validation fraction when none is given (None: the size of the input is unknown)."""
    if not total_bytes:
        return DEFAULT_FRACTION
    wanted = AUTO_MIN_BYTES / total_bytes
    return round(min(AUTO_MAX_FRACTION, max(DEFAULT_FRACTION, wanted)), 4)


class HoldOut:
    """The rule by documents: which of a stream of documents is held out (module docstring)."""

    def __init__(self, fraction: float) -> None:
        self.fraction = fraction
        self.total = 0
        """Bytes of all the documents so far."""
        self.held = 0
        """Bytes of the documents held out so far."""
        self.documents = 0

    def next_is_held(self) -> bool:
        if not self.documents:
            return False
        return self.fraction * self.total - self.held > self.total / self.documents / 2

    def add(self, nbytes: int, held: bool) -> None:
        self.total += nbytes
        self.held += nbytes if held else 0
        self.documents += 1


def _nbytes(text: str) -> int:
    return len(text.encode("utf-8"))


class Split:
    """One pass's split of a stream of pieces into ("train" | "val", piece): by documents, or
    with `lengths` (every document's bytes, in order) within each document."""

    def __init__(self, fraction: float, lengths: Sequence[int] | None = None) -> None:
        self.fraction = fraction
        self.within = lengths is not None
        self.lengths = lengths
        self.seen: list[int] | None = []
        """The bytes of each document while none has been held out (what the fallback needs),
        None once one has."""

    def holds_out_nothing(self) -> bool:
        """Whether the last pass by documents read documents and held out none of them."""
        return bool(self.seen) and not self.within

    def within_documents(self) -> Split:
        """The split within each document of the documents the last pass read."""
        assert self.holds_out_nothing()
        return Split(self.fraction, lengths=self.seen)

    def __call__(self, pieces: Iterable[Piece]) -> Iterator[tuple[str, Piece]]:
        if self.within:
            yield from _without_blank_parts(self._within(pieces))
        else:
            yield from self._by_documents(pieces)

    def _by_documents(self, pieces: Iterable[Piece]) -> Iterator[tuple[str, Piece]]:
        rule = HoldOut(self.fraction)
        self.seen = []
        split, size = None, 0
        for piece in pieces:
            if split is None:
                split = "val" if rule.next_is_held() else "train"
            size += _nbytes(piece.text)
            yield split, piece
            if piece.last:
                rule.add(size, split == "val")
                if self.seen is not None:
                    self.seen.append(size)
                    if split == "val":
                        self.seen = None
                split, size = None, 0

    def _within(self, pieces: Iterable[Piece]) -> Iterator[tuple[str, Piece]]:
        assert self.lengths is not None
        lengths = iter(self.lengths)
        cut: int | None = None
        offset = 0
        for piece in pieces:
            if cut is None:  # a document starts
                cut, offset = int(next(lengths) * (1 - self.fraction)), 0
            size = _nbytes(piece.text)
            if offset <= cut < offset + size:  # the cut falls in this piece
                start = len(piece.text.encode("utf-8")[: cut - offset].decode("utf-8", "ignore"))
                space = _SPACE.search(piece.text, start)
                at = space.start() if space else len(piece.text)
                yield "train", Piece(piece.text[:at], True)
                if at < len(piece.text) or piece.last:
                    yield "val", Piece(piece.text[at:], piece.last)
            else:
                yield ("train" if offset < cut else "val"), piece
            offset += size
            if piece.last:
                cut = None


def _without_blank_parts(
    stream: Iterable[tuple[str, Piece]],
) -> Iterator[tuple[str, Piece]]:
    """The stream without the parts (pieces up to one marked last) that hold only whitespace:
    a part's pieces are held back until one of them has a non-space character."""
    held: list[tuple[str, Piece]] = []
    shown = False
    for split, piece in stream:
        if not shown and not piece.text.strip():
            held.append((split, piece))
        else:
            yield from held
            held.clear()
            shown = True
            yield split, piece
        if piece.last:
            held.clear()
            shown = False
