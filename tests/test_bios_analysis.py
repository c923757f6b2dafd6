"""The bios rules on hand-made recall tables: the regime, collapse per seed, same-seed differences,
the least recall over deep serving depths, and the report's sentences from them."""

from __future__ import annotations

import math

import pytest

from fixedfirst.studies.bios.analysis import analyse
from fixedfirst.studies.bios.report import findings

CEILING = 40.0
DEPTHS = [1, 2, 4, 8, 16, 64]
T_975_2 = 4.302652730


def results(bits: dict[tuple[str, int], dict[int, float]]) -> dict:
    """A results.json with the full budget only; bits[(arm, seed)][depth]."""
    recall = [
        {"schedule": arm, "seed": seed, "budget_fraction": 1.0, "depth": d, "bits_per_person": b}
        for (arm, seed), row in bits.items()
        for d, b in row.items()
    ]
    runs = {
        f"{arm}-seed{seed}": {"schedule": arm, "seed": seed, "steps": 10, "switch": None}
        for arm, seed in bits
    }
    return {
        "recall": recall,
        "runs": runs,
        "ceiling_bits": CEILING,
        "budget_fractions": [1.0],
        "depths": DEPTHS,
    }


def row(d1, d2, d4, deep):
    return {1: d1, 2: d2, 4: d4, 8: deep, 16: deep, 64: deep}


def three_seeds():
    return {
        ("fixed-4", 0): row(10.0, 30.0, 36.0, 36.0),  # the regime holds: 36 >= 32, 10 <= 18
        ("fixed-4", 1): row(12.0, 30.0, 34.0, 16.0),  # holds, and collapses: 16 <= 17 at 8+
        ("fixed-4", 2): row(20.0, 30.0, 38.0, 38.0),  # depth 1 too strong: 20 > 19
        ("uniform-1-16", 0): row(1.0, 2.0, 2.0, 8.0),
        ("uniform-1-16", 1): row(1.0, 2.0, 3.0, 9.0),
        ("uniform-1-16", 2): row(1.0, 2.0, 3.5, 10.0),
    }


def test_the_regime_and_collapse_per_seed():
    a = analyse(results(three_seeds()))
    regime = a["regime"]
    assert [regime["per_seed"][s]["holds"] for s in "012"] == [True, True, False]
    assert regime["per_seed"]["0"]["depth_1_of_depth_4"] == pytest.approx(10 / 36)
    assert not regime["holds_in_every_seed"]
    collapse = a["collapse"]["fixed-4"]
    assert collapse["collapsed_seeds"] == [1]
    assert collapse["per_seed"]["1"]["kept"] == pytest.approx(16 / 34)
    assert collapse["per_seed"]["0"]["kept"] == pytest.approx(1.0)
    # uniform recalls 2-3.5 bits at depth 4, under 10% of the ceiling: too little to judge
    assert a["collapse"]["uniform-1-16"]["too_little_to_judge"] == [0, 1, 2]


def test_same_seed_difference_of_the_mean_over_depths_by_hand():
    a = analyse(results(three_seeds()))
    entry = next(c for c in a["comparisons"] if (c["a"], c["b"]) == ("fixed-4", "uniform-1-16"))
    diffs = []
    for seed in range(3):
        f, u = three_seeds()[("fixed-4", seed)], three_seeds()[("uniform-1-16", seed)]
        diffs.append(sum(f.values()) / 6 - sum(u.values()) / 6)
    mean = sum(diffs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in diffs) / 2)
    d = entry["mean_over_depths"]
    assert d["mean"] == pytest.approx(mean)
    assert d["high"] - d["mean"] == pytest.approx(T_975_2 * sd / math.sqrt(3))
    assert d["sign"] == "positive"


def test_least_deep_recall_and_the_sentences():
    bits = three_seeds()
    bits.update({("fixed-first-4-0.8", s): row(30.0, 39.0, 39.5, 38.0 + s) for s in range(3)})
    a = analyse(results(bits))
    ceiling = a["at_ceiling"]["fixed-first-4-0.8"]
    assert ceiling["min"] == pytest.approx(38.0 / CEILING)
    assert ceiling["mean"] == pytest.approx((38.0 + 39.0 + 39.0) / 3 / CEILING)
    text = " ".join(findings({**results(bits), "analysis": a}))
    assert "fixed K=4 collapses in seed 1" in text
    assert "does not hold in every seed" in text
    assert "least recall over serving depths 2..64 is 97% of the ceiling" in text
