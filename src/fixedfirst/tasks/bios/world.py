"""The fictional world of the bios task: name pools, attribute pools and N people.

Allen-Zhu & Li (2023, "Physics of Language Models 3.1") give each person a unique full name and
six attributes drawn uniformly and independently: birth city, birth day, birth month, university,
major and employer. Because the attributes are uniform and independent, a person carries exactly
sum(log2(pool size)) bits, and a model that recalls a fact has memorised log2(pool size) bits:
with the original pools (200 cities, 28 days, 12 months, 300 universities, 100 majors, 263
employers) that is 38.95 bits. The paper this project implements quotes 33.39 bits per person;
no natural choice of the original pools gives that figure, so we report what our pools give.

Every name and value comes from `words.WordFactory` (fictional, seeded, never a published list);
only the 28 day ordinals and the 12 month names are real words. Each pool draws from its own
generator stream, so changing one pool's size leaves the others' words in place. Every value of
an attribute has the same number of words (one, or two for universities and employers: a
fictional stem and a kind such as "Institute"), which keeps every biography the same length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fixedfirst.config import require
from fixedfirst.errors import UserError
from fixedfirst.tasks.bios.templates import template_words
from fixedfirst.tasks.bios.words import WordFactory

ATTRIBUTES = ("birth_city", "birth_day", "birth_month", "university", "major", "employer")
"""The six tested attributes, in the order used by every table (facts, recall, reports)."""

MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
DAYS_PER_MONTH = 28
UNIVERSITY_KINDS = ("University", "Institute", "College", "Academy")
EMPLOYER_KINDS = ("Labs", "Group", "Works", "Systems", "Partners", "Holdings")
MAJOR_SUFFIXES = ("ology", "onomy", "istics", "ography", "ics")
CITY_SUFFIXES = ("", "", "a", "ia", "or", "ell")


MAX_POOL = 1_000_000
"""The most people, or words in one pool, a bios world generates."""


@dataclass
class BiosOptions:
    """The bios world's size: `[data.bios]` (pool sizes of the original: 400 first, 400 middle,
    1000 last names; 200 cities, 300 universities, 100 majors, 263 employers)."""

    SECTION: ClassVar[str] = "data.bios"

    people: int = 1000
    """Number of fictional people."""
    first_names: int = 400
    """Size of the first-name pool."""
    middle_names: int = 400
    """Size of the middle-name pool."""
    last_names: int = 1000
    """Size of the last-name pool."""
    cities: int = 200
    """Birth-city pool size."""
    universities: int = 300
    """University pool size."""
    majors: int = 100
    """Major pool size."""
    employers: int = 263
    """Employer pool size."""

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            require(value >= 1, f"{self.SECTION}.{name}", f"must be >= 1, got {value}")
            # Every person and pool word is generated up front (and is one token).
            require(
                value <= MAX_POOL,
                f"{self.SECTION}.{name}",
                f"must be <= {MAX_POOL:,} (each is generated up front), got {value:,}",
            )


def ordinal(n: int) -> str:
    """1 -> "1st", 2 -> "2nd", 11 -> "11th", 23 -> "23rd"."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


@dataclass(frozen=True)
class Pools:
    """Every possible name part and attribute value."""

    first_names: tuple[str, ...]
    middle_names: tuple[str, ...]
    last_names: tuple[str, ...]
    values: dict[str, tuple[str, ...]]
    """Attribute -> its possible values (each a string of one or two words)."""

    @property
    def distinct_names(self) -> int:
        return len(self.first_names) * len(self.middle_names) * len(self.last_names)

    def sizes(self) -> dict[str, int]:
        return {attribute: len(self.values[attribute]) for attribute in ATTRIBUTES}

    def bits_per_person(self) -> float:
        """Information in one person's six facts: sum of log2(pool size) (uniform, independent)."""
        return sum(math.log2(n) for n in self.sizes().values())

    def words(self) -> list[str]:
        """Every word of every name part and value, each once, in a fixed order (the vocabulary)."""
        seen: dict[str, None] = {}
        for pool in (self.first_names, self.middle_names, self.last_names):
            seen.update(dict.fromkeys(pool))
        for attribute in ATTRIBUTES:
            for value in self.values[attribute]:
                seen.update(dict.fromkeys(value.split()))
        return list(seen)


def build_pools(options: BiosOptions, seed: int = 0) -> Pools:
    """The name and value pools (sizes from `options`, words from the data seed)."""
    fixed_words = {*MONTHS, *UNIVERSITY_KINDS, *EMPLOYER_KINDS, *template_words()}
    factory = WordFactory(reserved=fixed_words)

    def stream(index: int) -> np.random.Generator:
        return np.random.default_rng([seed, 0xB105, index])

    first = factory.words(options.first_names, stream(0))
    middle = factory.words(options.middle_names, stream(1))
    last = factory.words(options.last_names, stream(2))
    cities = factory.words(options.cities, stream(3), CITY_SUFFIXES)
    university_stems = factory.words(options.universities, stream(4))
    majors = factory.words(options.majors, stream(5), MAJOR_SUFFIXES)
    employer_stems = factory.words(options.employers, stream(6))
    kinds = stream(7)
    universities = [
        f"{stem} {UNIVERSITY_KINDS[kinds.integers(len(UNIVERSITY_KINDS))]}"
        for stem in university_stems
    ]
    employers = [
        f"{stem} {EMPLOYER_KINDS[kinds.integers(len(EMPLOYER_KINDS))]}" for stem in employer_stems
    ]
    values = {
        "birth_city": tuple(cities),
        "birth_day": tuple(ordinal(d) for d in range(1, DAYS_PER_MONTH + 1)),
        "birth_month": MONTHS,
        "university": tuple(universities),
        "major": tuple(majors),
        "employer": tuple(employers),
    }
    return Pools(tuple(first), tuple(middle), tuple(last), values)


@dataclass(frozen=True, eq=False)
class World:
    """N people: unique full names and their six facts (value indices into the pools)."""

    pools: Pools
    names: tuple[str, ...]
    """Full names, "First Middle Last", all different."""
    facts: np.ndarray
    """(people, 6) int64: facts[p, a] indexes pools.values[ATTRIBUTES[a]]."""

    @property
    def people(self) -> int:
        return len(self.names)

    def value(self, person: int, attribute: str) -> str:
        index = self.facts[person, ATTRIBUTES.index(attribute)]
        return self.pools.values[attribute][index]

    @property
    def bits_per_person(self) -> float:
        """The recall ceiling: every fact of every person recalled."""
        return self.pools.bits_per_person()


def build_world(options: BiosOptions, seed: int = 0) -> World:
    """`options.people` people drawn from the pools, seeded by the data seed."""
    pools = build_pools(options, seed)
    if options.people > pools.distinct_names:
        raise UserError(
            f"data.bios.people = {options.people} exceeds the {pools.distinct_names} distinct "
            "full names (first_names x middle_names x last_names); raise a name pool or lower "
            "data.bios.people"
        )
    rng = np.random.default_rng([seed, 0xB105, 100])
    n_middle, n_last = len(pools.middle_names), len(pools.last_names)
    codes = rng.choice(pools.distinct_names, size=options.people, replace=False)
    names = tuple(
        f"{pools.first_names[c // (n_middle * n_last)]} "
        f"{pools.middle_names[c // n_last % n_middle]} {pools.last_names[c % n_last]}"
        for c in codes.tolist()
    )
    sizes = pools.sizes()
    facts = np.stack([rng.integers(0, sizes[a], size=options.people) for a in ATTRIBUTES], axis=1)
    return World(pools=pools, names=names, facts=facts.astype(np.int64))
