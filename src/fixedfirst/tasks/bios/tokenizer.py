"""The bios vocabulary: exactly the words the bios world can produce, one token per word.

Words are split on whitespace; each template word, name part, value word, day ordinal and month is
one token, so a biography is about 50 tokens, which is what makes this task train in minutes on a
CPU, and "recalled a value" means "produced its one or two value tokens and the terminator".
The three special tokens of `WordTokenizer` come first: padding, beginning of a biography, end of a
biography.
"""

from __future__ import annotations

from fixedfirst.data.tokenizer import WordTokenizer
from fixedfirst.tasks.bios.templates import template_words
from fixedfirst.tasks.bios.world import Pools


class BiosTokenizer(WordTokenizer):
    @classmethod
    def for_pools(cls, pools: Pools) -> BiosTokenizer:
        """The vocabulary of a world: specials, template words, then every name and value word."""
        return cls([*template_words(), *pools.words()])
