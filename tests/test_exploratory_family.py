"""An exploratory family (studies/kit/claims.py): differences zero in every seed leave it, and
what its first Holm threshold could have declared at all, checked against t's closed form."""

from __future__ import annotations

import math

import pytest

from fixedfirst.studies.kit.claims import (
    ZERO_EVERYWHERE,
    correct_family,
    family_counts,
    first_holm_t,
    same_seed_difference,
)
from fixedfirst.studies.kit.paragraphs import holm_reach


def t_two_df(p_two_sided: float) -> float:
    """|t| whose two-sided p is `p_two_sided` on 2 degrees of freedom: that t's CDF is
    1/2 + t / (2 sqrt(2 + t^2)), so p = 1 - t / sqrt(2 + t^2)."""
    c = 1.0 - p_two_sided
    return math.sqrt(2.0 * c * c / (1.0 - c * c))


def differences(per_seed: list[tuple[float, float, float]]) -> list[dict]:
    """Same-seed differences of three seeds, each given as its three values (b is zero)."""
    return [
        same_seed_difference(dict(enumerate(values)), dict.fromkeys(range(3), 0.0))
        for values in per_seed
    ]


def test_differences_zero_in_every_seed_leave_the_family():
    """A difference of t = 6.965 (p = 0.02 on 2 degrees of freedom), one far from zero (p ~ 0.4)
    and three exact zeros. Counted, the zeros would make a family of 5, whose first threshold
    0.01 the p = 0.02 difference misses; left out, the family is 2 and 0.02 <= 0.025 declares
    it."""
    lead = 6.965 / math.sqrt(3)  # sd 1 (values mean +- 1): t = mean / (1 / sqrt 3)
    family = differences(
        [(lead - 1, lead, lead + 1), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (1, -2, 4)]
    )
    correct_family(family)
    assert family[0]["p"] == pytest.approx(0.02, abs=1e-4)
    assert family[0]["holm"] == "positive"
    assert [d["holm"] for d in family[1:4]] == [ZERO_EVERYWHERE] * 3
    assert family[4]["holm"] == "cannot tell"
    counts = family_counts(family)
    assert (counts["size"], counts["zero"], counts["corrected"], counts["seeds"]) == (2, 3, 1, 3)


def test_the_first_holm_threshold_and_the_least_difference_it_could_declare():
    """Over 70 differences on 3 seeds the first threshold is p <= 0.05 / 70: |t| >= 37.4 (the
    issue's figure); the least declarable mean is that t times the smallest standard error, here
    the member of sd 0.5: 37.4 * 0.5 / sqrt(3)."""
    assert first_holm_t(70, 3) == pytest.approx(t_two_df(0.05 / 70), rel=1e-6)
    assert first_holm_t(70, 3) == pytest.approx(37.4, abs=0.05)
    assert first_holm_t(34, 3) == pytest.approx(26.0, abs=0.05)
    family = differences([(1.0, 1.5, 2.0), (3.0, 5.0, 7.0), (0.0, 0.0, 0.0), (2.0, 2.0, 2.0)])
    correct_family(family)
    counts = family_counts(family)
    assert counts["size"] == 3  # a constant non-zero difference stays: it is not zero
    t = t_two_df(0.05 / 3)
    assert counts["t_needed"] == pytest.approx(t, rel=1e-6)
    assert counts["least_declarable"] == pytest.approx(t * 0.5 / math.sqrt(3), rel=1e-6)
    sentence = holm_reach(counts, lambda x: f"{100 * x:.1f} points")
    assert sentence == (
        f"Holm's first threshold over 3 differences (p <= 5%/3) needs |t| >= {t:.1f} on 2 "
        "degrees of freedom: with these seeds' spread no mean difference smaller than "
        f"{100 * t * 0.5 / math.sqrt(3):.1f} points could have been declared (the difference "
        "whose seeds agree most); 1 difference zero in every seed is left out of it."
    )
    assert holm_reach({"size": 0, "zero": 4}, str) == ""
