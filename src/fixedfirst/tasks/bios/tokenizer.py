"""A word-level tokenizer whose vocabulary is exactly the words the bios world can produce.

Words are split on whitespace; each template word, name part, value word, day ordinal and month is
one token. Sub-word tokenizers would spell a fictional name in several pieces; one token per word
keeps a biography at about 50 tokens, which is what makes this task train in minutes on a CPU, and
makes "recalled a value" mean "produced its one or two value tokens and the terminator". Three
special tokens come first: padding, beginning of a biography, end of a biography.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from fixedfirst.errors import UserError
from fixedfirst.tasks.bios.templates import template_words
from fixedfirst.tasks.bios.world import Pools

PAD = "<pad>"
BOS = "<bos>"
EOS = "<eos>"


class BiosTokenizer:
    def __init__(self, words: Iterable[str]) -> None:
        self.vocab: list[str] = list(dict.fromkeys([PAD, BOS, EOS, *words]))
        self.ids: dict[str, int] = {word: i for i, word in enumerate(self.vocab)}
        self.pad_id, self.bos_id, self.eos_id = self.ids[PAD], self.ids[BOS], self.ids[EOS]

    @classmethod
    def for_pools(cls, pools: Pools) -> BiosTokenizer:
        """The vocabulary of a world: specials, template words, then every name and value word."""
        return cls([*template_words(), *pools.words()])

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        try:
            return [self.ids[word] for word in text.split()]
        except KeyError as e:
            raise UserError(f"the word {e.args[0]!r} is not in the bios vocabulary") from None

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(self.vocab[i] for i in ids)
