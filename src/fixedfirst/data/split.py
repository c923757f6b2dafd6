"""Which text is held out for validation: whole documents, or for a corpus of too few
documents, the end of each one.

By documents (the rule): with a validation fraction f, document i is held out when
round((i + 1) f) > round(i f). That holds out round(n f) documents spread evenly over the
corpus (every input contributes, unlike a tail cut), needs no random state, and works while
streaming, without knowing n in advance.

By bytes (the fallback): a handful of files, each one document, leaves round(n f) = 0 documents
for validation. Then the last f of every document's text (cut at a whitespace) is held out and
the rest trains; the validation text is still unseen in training, though it follows training
text of the same document.

The validation fraction itself, when not given, is 1%, raised for a small corpus to
AUTO_MIN_BYTES / its size (at most 10%): what one default evaluation reads (4 batches of 16
sequences of 129 tokens, about 8k tokens) with room to spare. It is a fraction of the
documents, so the text held out is about AUTO_MIN_BYTES only when the documents are of even
size, and under 10 AUTO_MIN_BYTES of text the cap holds out less; `fixedfirst prepare` prints
how much it held out, and says so when that is less than a default evaluation scores.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

DEFAULT_FRACTION = 0.01
AUTO_MAX_FRACTION = 0.1
AUTO_MIN_BYTES = 16_384


def is_validation(index: int, fraction: float) -> bool:
    """Whether document `index` belongs to the validation split (see the module docstring)."""
    return math.floor((index + 1) * fraction + 0.5) > math.floor(index * fraction + 0.5)


def auto_fraction(total_bytes: int | None) -> float:
    """The validation fraction when none is given (None: the size of the input is unknown)."""
    if not total_bytes:
        return DEFAULT_FRACTION
    wanted = AUTO_MIN_BYTES / total_bytes
    return round(min(AUTO_MAX_FRACTION, max(DEFAULT_FRACTION, wanted)), 4)


def _cut(text: str, fraction: float) -> int:
    """Where the last `fraction` of `text` starts, moved forward to a whitespace."""
    cut = int(len(text) * (1 - fraction))
    space = next((i for i in range(cut, len(text)) if text[i].isspace()), cut)
    return space


def split_documents(
    documents: Iterable[str], fraction: float, by_bytes: bool
) -> Iterator[tuple[str, str]]:
    """("train" | "val", text) for every document (by bytes: for both parts of each)."""
    for index, text in enumerate(documents):
        if not by_bytes:
            yield ("val" if is_validation(index, fraction) else "train"), text
            continue
        cut = _cut(text, fraction)
        if text[:cut].strip():
            yield "train", text[:cut]
        if text[cut:].strip():
            yield "val", text[cut:]
