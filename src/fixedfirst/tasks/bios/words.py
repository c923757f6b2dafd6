"""Pronounceable fictional words, built from syllables: the raw material of every bios pool.

Names, cities, universities, majors and employers must be fictional (the task measures what a model
memorises from our biographies, not what it already knows) and must come from our own generator,
never from a published list. A word is two or three syllables, each an onset, a vowel and a coda
(inside the word only a soft one or none), so it can be read aloud. One `WordFactory` hands out the
words of every pool and never repeats one, so each pool value is its own token and no value of one
pool is also a value of another.
"""

from __future__ import annotations

import numpy as np

from fixedfirst.errors import UserError

ONSETS = (
    "b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z",
    "br", "dr", "gr", "kr", "tr", "st", "sh", "th", "pl", "fl", "qu",
)  # fmt: skip
VOWELS = ("a", "e", "i", "o", "u", "a", "e", "i", "o", "ai", "ea", "ou")  # plain ones doubled
INNER_CODAS = ("", "", "", "n", "r", "l")
FINAL_CODAS = ("", "", "n", "r", "l", "s", "m", "th", "nd", "sk", "x")

_MAX_ATTEMPTS_PER_WORD = 1000


def _pick(options: tuple[str, ...], rng: np.random.Generator) -> str:
    return options[rng.integers(len(options))]


class WordFactory:
    """Fresh capitalised words, each one different from every word handed out or reserved before."""

    def __init__(self, reserved: set[str] | None = None) -> None:
        self.used: set[str] = set(reserved or ())

    def word(self, rng: np.random.Generator, suffixes: tuple[str, ...] = ("",)) -> str:
        """One random word (maybe a used one); a suffix follows a soft coda, never a hard one."""
        suffix = _pick(suffixes, rng)
        n_syllables = 2 if rng.random() < 0.7 else 3
        syllables = [
            _pick(ONSETS, rng)
            + _pick(VOWELS, rng)
            + _pick(FINAL_CODAS if i == n_syllables - 1 and not suffix else INNER_CODAS, rng)
            for i in range(n_syllables)
        ]
        return ("".join(syllables) + suffix).capitalize()

    def words(
        self, count: int, rng: np.random.Generator, suffixes: tuple[str, ...] = ("",)
    ) -> list[str]:
        """`count` new words drawn with `rng`, each ending in one of `suffixes` (chosen at random).

        Suffixes give a pool its flavour (majors end like fields of study) without letting two
        pools share a word, since uniqueness is checked on the whole word."""
        out: list[str] = []
        for _ in range(_MAX_ATTEMPTS_PER_WORD * max(count, 1)):
            if len(out) == count:
                return out
            word = self.word(rng, suffixes)
            if word not in self.used:
                self.used.add(word)
                out.append(word)
        if len(out) == count:
            return out
        raise UserError(f"cannot generate {count} distinct fictional words for a pool; use fewer")
