"""The bios rules on hand-made recall tables: the regime, collapse per seed, same-seed differences,
the least recall over deep serving depths, and the report's sentences from them."""

from __future__ import annotations

import math

import pytest

from fixedfirst.studies.bios.analysis import BIOS_CLAIMS, analyse
from fixedfirst.studies.bios.report import findings, primary_findings
from fixedfirst.studies.kit.claims import Claim

CEILING = 40.0
DEPTHS = [1, 2, 4, 8, 16, 64]
T_975_2 = 4.302652730


def results(bits: dict[tuple[str, int], dict[int, float]], primary=()) -> dict:
    """A results.json with the full budget only; bits[(arm, seed)][depth]; `primary`: the
    preset's primary claims."""
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
        "primary": [BIOS_CLAIMS.write(p) for p in primary],
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


def claim(name: str, arm: str, quantity: str, side: str, bar: float) -> Claim:
    keys = {"name": name, "arm": arm, "quantity": quantity, "claim": side, "bar": bar}
    return BIOS_CLAIMS.read(keys)


def claims(bars: tuple[float, float, float]) -> list[Claim]:
    kept, uniform, ceiling = bars
    return [
        claim("Fixed K = 4 keeps half", "fixed-4", "kept_of_depth_4", "at least", kept),
        claim("Uniform barely", "uniform-1-16", "mean_of_ceiling", "below", uniform),
        claim("At the ceiling", "fixed-first-4-0.8", "least_of_ceiling", "at least", ceiling),
    ]


def by_hand(values: list[float]) -> tuple[float, float, float]:
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    half = T_975_2 * sd / math.sqrt(len(values))
    return mean, mean - half, mean + half


@pytest.mark.parametrize(
    ("bars", "verdicts"),
    [
        ((0.5, 0.1, 0.95), ["cannot tell", "cannot tell", "cannot tell"]),
        ((0.06, 0.18, 0.9), ["holds", "holds", "holds"]),
        ((0.5, 0.09, 1.0), ["cannot tell", "does not hold", "cannot tell"]),
    ],
)
def test_primary_claims_are_decided_by_their_own_intervals_by_hand(bars, verdicts):
    """Per seed, from the rows: fixed K=4 keeps 36/36, 16/34, 38/38 of its depth-4 recall at
    depths 8..64 (interval [0.064, 1.583]); uniform averages 29, 33, 36.5 bits over the six
    depths, / 6 / 40 of the ceiling ([0.098, 0.176]); fixed-first's least over depths 2..64 is
    38, 39, 39 of 40 ([0.931, 1.003], a share of the ceiling: cut at 1). Each verdict is its
    interval against its own bar."""
    bits = three_seeds()
    bits.update(
        {("fixed-first-4-0.8", s): row(30.0, 39.0, 39.5, 38.0 + min(s, 1)) for s in range(3)}
    )
    a = analyse(results(bits, claims(bars)))
    expected = [
        by_hand([36 / 36, 16 / 34, 38 / 38]),
        by_hand([29 / 6 / CEILING, 33 / 6 / CEILING, 36.5 / 6 / CEILING]),
        (*by_hand([38 / CEILING, 39 / CEILING, 39 / CEILING])[:2], 1.0),
    ]
    assert by_hand([38 / CEILING, 39 / CEILING, 39 / CEILING])[2] > 1.0
    for p, (mean, low, high) in zip(a["primary"], expected, strict=True):
        c = p["over_seeds"]
        assert (c["mean"], c["low"], c["high"]) == (
            pytest.approx(mean),
            pytest.approx(low),
            pytest.approx(high),
        )
    assert [p["verdict"] for p in a["primary"]] == verdicts
    text = primary_findings({**results(bits), "analysis": a})
    assert text[1] == (
        f"Uniform barely: uniform 1..16 at the full budget, recall averaged over serving depths "
        f"as a share of the ceiling: {100 * expected[1][0]:.1f}% [{100 * expected[1][1]:.1f}, "
        f"{100 * expected[1][2]:.1f}], mean over 3 seeds [95% interval]; claimed below "
        f"{100 * bars[1]:.0f}%: {verdicts[1]}."
    )


T_99_2 = 6.965
"""t at which a two-sided p is 0.02 with 2 degrees of freedom (printed t tables)."""


def test_holm_corrects_every_same_seed_difference_and_the_report_says_so():
    """Fixed-first recalls as uniform does at depths 1..4 and 4.02 + (-1, 0, +1) bits more at
    8..64 in seeds 0..2: at depth 64 that is t = 4.02 / (1 / sqrt(3)) = 6.965, p = 0.02, and the
    mean over the six depths is half of it, the same t, as is the mean off depth (8..64). Three
    pairs x (the mean, the mean off depth, depth 4, depth 64) make a family of 12; only fixed
    K=4's depth-4 lead over the other two (38, 34, 38 against 2-3.5 bits: p ~ 0.001) survives
    Holm; seven exclude zero uncorrected. Fixed-first minus uniform at depth 4 is zero in every
    seed, so it leaves the family: 11 remain (0.001 <= 0.05 / 11, then 0.02 > 0.05 / 9)."""
    bits = three_seeds()
    base = {0: (1.0, 2.0, 2.0, 8.0), 1: (1.0, 2.0, 3.0, 9.0), 2: (1.0, 2.0, 3.5, 10.0)}
    lead = T_99_2 / math.sqrt(3)
    for seed, z in zip(range(3), (-1, 0, 1), strict=True):
        d1, d2, d4, deep = base[seed]
        bits[("fixed-first-4-0.8", seed)] = row(d1, d2, d4, deep + lead + z)
    a = analyse(results(bits))
    family = a["exploratory"]
    assert (family["size"], family["zero"], family["uncorrected"], family["corrected"]) == (
        11,
        1,
        7,
        2,
    )
    entry = next(
        c for c in a["comparisons"] if (c["a"], c["b"]) == ("fixed-first-4-0.8", "uniform-1-16")
    )
    for key in ("mean_over_depths", "mean_off_depth", "depth_64"):
        assert entry[key]["p"] == pytest.approx(0.02, abs=1e-4)
        assert (entry[key]["sign"], entry[key]["holm"]) == ("positive", "cannot tell")
    fixed = next(c for c in a["comparisons"] if (c["a"], c["b"]) == ("fixed-4", "uniform-1-16"))
    assert fixed["depth_4"]["holm"] == "positive"
    text = " ".join(findings({**results(bits), "analysis": a}))
    assert "of the 11 the report computes (every pair of the 3 arms," in text
    assert "Same-seed differences of the average, exploratory (Holm over 11): " in text
    assert "1 difference zero in every seed is left out of it." in text
    assert (
        "fixed-first K0=4, switch 0.8 minus uniform 1..16 +2.0 [+0.8, +3.3] bits (cannot tell; "
        "uncorrected higher)" in text
    )


def test_the_loop_preset_names_the_three_primary_claims_of_the_page():
    """docs/studies/figure1.md, named before the rerun: K0 = 2's least recall over depths 2..64
    at least 95% of the ceiling, uniform's average below 10% of it, fixed K = 4 keeping at least
    half of its depth-4 recall at depths 8..64."""
    from fixedfirst.studies.bios.experiment import load_preset

    assert [(p.a, p.of, p.side, p.bar) for p in load_preset("loop").experiment.primary] == [
        ("fixed-first-2-0.67", "least_of_ceiling", "at least", 0.95),
        ("uniform-1-16", "mean_of_ceiling", "below", 0.10),
        ("fixed-4", "kept_of_depth_4", "at least", 0.5),
    ]


def test_figure_1s_contrast_off_depth_and_bounded_cells_by_hand():
    """Fixed-first against fixed K=4 off depth: per seed the mean over depths 8, 16, 64 of
    fixed-first's 38, 39, 40 bits against fixed K=4's 36, 16, 38 (differences 2, 23, 2); over
    every depth the six-depth means. The cells' intervals stay in [0, the ceiling]: uniform's
    depth-1 recall of 1, 1, 1 bits has none to cut, fixed-first's depth-64 recall of 38, 39, 40
    (a t-interval up to 41.4) is cut at 40."""
    bits = three_seeds()
    bits.update({("fixed-first-4-0.8", s): row(30.0, 39.0, 39.5, 38.0 + s) for s in range(3)})
    a = analyse(results(bits))
    assert a["off_depth"] == [8, 64]
    pair = ("fixed-first-4-0.8", "fixed-4")
    entry = next(c for c in a["comparisons"] if (c["a"], c["b"]) == pair)
    off = [38.0 - 36.0, 39.0 - 16.0, 40.0 - 38.0]
    mean, low, high = by_hand(off)
    d = entry["mean_off_depth"]
    assert (d["mean"], d["low"], d["high"]) == (
        pytest.approx(mean),
        pytest.approx(low),
        pytest.approx(high),
    )
    over = [
        sum(bits[("fixed-first-4-0.8", s)].values()) / 6 - sum(bits[("fixed-4", s)].values()) / 6
        for s in range(3)
    ]
    assert entry["mean_over_depths"]["mean"] == pytest.approx(sum(over) / 3)
    cell = a["cells"]["fixed-first-4-0.8"]["1"]["by_depth"]["64"]
    assert by_hand([38.0, 39.0, 40.0])[2] > CEILING and cell["high"] == CEILING
    assert cell["low"] == pytest.approx(by_hand([38.0, 39.0, 40.0])[1])
    text = " ".join(findings({**results(bits), "analysis": a}))
    assert (
        "Figure 1's contrast at the full budget, each fixed-first arm minus fixed K=4 (same "
        "seed, exploratory): off depth (recall averaged over serving depths 8..64) and averaged "
        f"over every serving depth: fixed-first K0=4, switch 0.8: off depth {mean:+.1f} "
        f"[{low:+.1f}, {high:+.1f}] bits (cannot tell)"
    ) in text


def test_the_pairs_compared_are_counted_when_an_arm_is_missing_from_the_list():
    """An arm the comparison list does not know is not compared: the report says how many of
    the possible pairs it computed instead of "every pair"."""
    bits = three_seeds()
    bits.update({("fixed-first-3-0.5", s): row(30.0, 39.0, 39.5, 38.0) for s in range(3)})
    a = analyse(results(bits))
    assert a["pairs"] == {"compared": 1, "possible": 3}
    assert "(1 of the 3 pairs of arms," in " ".join(findings({**results(bits), "analysis": a}))
