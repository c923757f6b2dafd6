"""The bios world: seeded, unique names, pool sizes from the config, and the bits arithmetic."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fixedfirst.errors import UserError
from fixedfirst.tasks.bios.templates import template_words
from fixedfirst.tasks.bios.world import (
    ATTRIBUTES,
    MONTHS,
    BiosOptions,
    build_pools,
    build_world,
    ordinal,
)

SMALL = dict(first_names=20, middle_names=20, last_names=30, cities=15, universities=12)
SMALL |= dict(majors=9, employers=11)


def test_same_seed_same_world_other_seed_other_world():
    a = build_world(BiosOptions(people=60, **SMALL), seed=3)
    b = build_world(BiosOptions(people=60, **SMALL), seed=3)
    c = build_world(BiosOptions(people=60, **SMALL), seed=4)
    assert a.names == b.names and a.pools == b.pools
    np.testing.assert_array_equal(a.facts, b.facts)
    assert a.pools.first_names != c.pools.first_names
    assert a.pools.values["birth_city"] != c.pools.values["birth_city"]
    assert not set(a.names) & set(c.names)
    assert not np.array_equal(a.facts, c.facts)


def test_names_are_unique_even_when_every_combination_is_used():
    data = BiosOptions(people=2 * 3 * 4, first_names=2, middle_names=3, last_names=4)
    world = build_world(data)
    assert len(set(world.names)) == world.people == 24
    assert all(len(name.split()) == 3 for name in world.names)
    big = build_world(BiosOptions(people=500, **SMALL))
    assert len(set(big.names)) == 500


def test_more_people_than_names_is_a_user_error():
    with pytest.raises(
        UserError, match=r"data.bios.people = 25 exceeds the 24 distinct full names"
    ):
        build_world(BiosOptions(people=25, first_names=2, middle_names=3, last_names=4))


def test_pool_sizes_come_from_the_config():
    data = BiosOptions(people=10, **SMALL)
    pools = build_pools(data)
    assert (len(pools.first_names), len(pools.middle_names), len(pools.last_names)) == (20, 20, 30)
    assert pools.sizes() == {
        "birth_city": 15,
        "birth_day": 28,
        "birth_month": 12,
        "university": 12,
        "major": 9,
        "employer": 11,
    }
    assert pools.values["birth_month"] == MONTHS
    assert pools.values["birth_day"][:4] == ("1st", "2nd", "3rd", "4th")
    assert [ordinal(n) for n in (11, 12, 13, 21, 22, 23, 28)] == [
        "11th", "12th", "13th", "21st", "22nd", "23rd", "28th",
    ]  # fmt: skip
    default = build_pools(BiosOptions())
    assert len(default.last_names) == 1000 and default.sizes()["employer"] == 263


def test_generated_words_are_fictional_unique_and_fixed_length_per_attribute():
    pools = build_pools(BiosOptions())
    name_parts = [*pools.first_names, *pools.middle_names, *pools.last_names]
    stems = [v.split()[0] for a in ("birth_city", "university", "major", "employer")
             for v in pools.values[a]]  # fmt: skip
    generated = name_parts + stems
    assert len(set(generated)) == len(generated)  # no word is in two pools or twice in one
    assert not set(generated) & {*template_words(), *MONTHS}
    assert all(w.isalpha() and w[0].isupper() and w[1:].islower() for w in generated)
    for attribute in ATTRIBUTES:
        values = pools.values[attribute]
        assert len(set(values)) == len(values)
        assert len({len(v.split()) for v in values}) == 1, attribute  # keeps biographies equal


def test_facts_index_their_pools_and_cover_them():
    world = build_world(BiosOptions(people=2000, **SMALL))
    sizes = world.pools.sizes()
    for i, attribute in enumerate(ATTRIBUTES):
        column = world.facts[:, i]
        assert column.min() == 0 and column.max() == sizes[attribute] - 1
        assert len(np.unique(column)) == sizes[attribute]
    assert world.value(7, "birth_month") == MONTHS[world.facts[7, 2]]


def test_bits_per_person():
    default = build_pools(BiosOptions())
    expected = sum(math.log2(n) for n in (200, 28, 12, 300, 100, 263))
    assert default.bits_per_person() == pytest.approx(expected)
    assert round(default.bits_per_person(), 2) == 38.95
    small = build_world(BiosOptions(people=5, **SMALL))
    assert small.bits_per_person == pytest.approx(math.log2(15 * 28 * 12 * 12 * 9 * 11))
