"""The chains experiment's rules on hand-made score tables: what counts as solved, the depth chosen
on the selection set, same-seed differences and their verdicts, collapse, "extrapolates best"."""

from __future__ import annotations

import math

import pytest

from fixedfirst.studies.chains.analysis import analyse, chosen_depth, solved_up_to
from fixedfirst.studies.chains.rerun import compare, rerun_markdown
from fixedfirst.studies.kit.claims import Claim

DEPTHS = [1, 4, 16, 64]
MAX_OPS = 4  # bands 0..2 (easy), 3..4 (hard), 5..8 (near), 9..12 (far)
BANDS = {"easy": (0, 2), "hard": (3, 4), "near": (5, 8), "far": (9, 12)}
T_975_4 = 2.776445105


def comparison(
    name: str, band: str, a: str, a_depth: int, b: str, b_depth: int, bar: float | None = None
) -> Claim:
    """A primary comparison as a chains preset writes one."""
    return Claim(name, a, b, band, a_depth, b_depth, bar=bar)


PRIMARY = [
    comparison("Depth decides the answer", "hard", "uniform-1-16", 16, "uniform-1-16", 1, 0.4),
    comparison("Fixed serves shallow", "hard", "fixed-4", 1, "uniform-1-16", 1),
]
"""Two primary comparisons the hand-made runs below have (the presets' need five schedules)."""


def scored(by_role: dict[int, dict[str, float]]) -> dict:
    """A set's scores where every difficulty of a band has the band's accuracy, per depth."""
    accuracy = {}
    for depth in DEPTHS:
        row = []
        for role, (low, high) in BANDS.items():
            row += [by_role[depth][role]] * (high - low + 1)
        accuracy[str(depth)] = row
    bands = {
        f"{low}..{high}": {
            "low": low,
            "high": high,
            "in_range": role in ("easy", "hard"),
            "by_depth": {str(d): by_role[d][role] for d in DEPTHS},
        }
        for role, (low, high) in BANDS.items()
    }
    return {"sequences": 8, "eval_ops": 12, "accuracy": accuracy, "bands": bands}


def run(schedule: str, seed: int, hard: dict[int, float], near: dict[int, float], easy=1.0) -> dict:
    by_role = {d: {"easy": easy, "hard": hard[d], "near": near[d], "far": 0.1} for d in DEPTHS}
    exit_rule = {
        "threshold": 1e-3,
        "max_depth": 64,
        "accuracy": [0.5] * 13,
        "mean_depth": [3.0] * 13,
    }
    return {
        "schedule": schedule,
        "seed": seed,
        "scores": {
            "sets": {"standard": scored(by_role)},
            "selection": scored(by_role),
            "kl_exit": exit_rule,
        },
    }


def test_solved_up_to_counts_from_difficulty_zero():
    assert solved_up_to([0.95, 0.92, 0.90, 0.89, 0.99]) == 2
    assert solved_up_to([0.5, 1.0]) == -1
    assert solved_up_to([1.0, 1.0, 1.0]) == 2


def test_the_chosen_depth_reads_the_selection_set_only():
    r = run("uniform-1-16", 0, {d: 0.5 for d in DEPTHS}, {1: 0.1, 4: 0.3, 16: 0.7, 64: 0.7})
    r["scores"]["sets"]["standard"]["bands"]["5..8"]["by_depth"]["64"] = 1.0  # test labels
    assert chosen_depth(r, DEPTHS) == 16  # a tie on the selection set: the smaller depth


def five_seeds():
    gains = [0.40, 0.50, 0.60, 0.70, 0.80]  # uniform's hard-band K=16 minus K=1
    runs = {}
    for seed, g in enumerate(gains):
        uniform_hard = {1: 0.1, 4: 0.5, 16: 0.1 + g, 64: 0.1 + g}
        uniform_near = {1: 0.05, 4: 0.1, 16: 0.3, 64: 0.5 + 0.01 * seed}
        runs[f"uniform-1-16-seed{seed}"] = run("uniform-1-16", seed, uniform_hard, uniform_near)
        # fixed K=4: near band at 64 always 0.2 above uniform's; in-range collapse in seed 2
        fixed_hard = {1: 0.1, 4: 0.9, 16: 0.9, 64: 0.3 if seed == 2 else 0.9}
        fixed_near = {d: v + (0.2 if d == 64 else 0.0) for d, v in uniform_near.items()}
        easy = 1.0
        runs[f"fixed-4-seed{seed}"] = run("fixed-4", seed, fixed_hard, fixed_near, easy)
        if seed == 2:  # in-range accuracy at K=64 at most half of that at K=4
            table = runs[f"fixed-4-seed{seed}"]["scores"]["sets"]["standard"]
            table["accuracy"]["64"][: MAX_OPS + 1] = [0.3] * (MAX_OPS + 1)
    return runs


def test_depth_gain_by_hand():
    a = analyse(five_seeds(), DEPTHS, MAX_OPS, PRIMARY)
    gain = a["depth_gain"]["uniform-1-16"]
    half = T_975_4 * math.sqrt(0.025) / math.sqrt(5)  # sd of 0.4..0.8 in steps of 0.1
    assert gain["mean"] == pytest.approx(0.6)
    assert (gain["low"], gain["high"]) == (pytest.approx(0.6 - half), pytest.approx(0.6 + half))


def test_an_accuracy_interval_stays_within_0_and_1():
    """Fixed K=4's hard band at K=64: 0.9, 0.9, 0.3, 0.9, 0.9 over the seeds, whose t-interval
    (by hand) reaches past 1: it is cut at 1, its lower end kept; the near band at K=1 (0.05 in
    every seed) has no spread and nothing to cut."""
    a = analyse(five_seeds(), DEPTHS, MAX_OPS, PRIMARY)
    cell = a["band_accuracy"]["fixed-4"]["standard"]["hard"]["64"]
    values = [0.9, 0.9, 0.3, 0.9, 0.9]
    mean = sum(values) / 5
    half = T_975_4 * math.sqrt(sum((v - mean) ** 2 for v in values) / 4) / math.sqrt(5)
    assert mean + half > 1.0
    assert cell["mean"] == pytest.approx(mean) and cell["high"] == 1.0
    assert cell["low"] == pytest.approx(mean - half)
    near = a["band_accuracy"]["fixed-4"]["standard"]["near"]["1"]
    assert near["low"] == pytest.approx(0.05) and near["high"] == pytest.approx(0.05)


def test_same_seed_differences_and_the_best_schedule():
    a = analyse(five_seeds(), DEPTHS, MAX_OPS, PRIMARY)
    near = a["versus_reference"]["fixed-4"]["standard"]["near@64"]
    assert near["mean"] == pytest.approx(0.2) and near["sign"] == "positive"
    assert near["high"] - near["low"] == pytest.approx(0.0, abs=1e-12)  # pairing removes seeds
    best = a["extrapolates_best"]
    assert best["schedule"] == "fixed-4" and best["holds"]


def test_collapse_is_found_in_the_seed_where_it_happens():
    a = analyse(five_seeds(), DEPTHS, MAX_OPS, PRIMARY)
    collapse = a["collapse"]["fixed-4"]
    assert collapse["collapsed_seeds"] == [2]
    assert collapse["kept"]["min"] == pytest.approx(0.3 / ((3 * 1.0 + 2 * 0.9) / 5))
    assert a["collapse"]["uniform-1-16"]["collapsed_seeds"] == []


def test_best_does_not_hold_when_seeds_disagree():
    runs = five_seeds()
    for seed in (0, 1):  # fixed K=4 below uniform on near at 64 in two seeds
        bands = runs[f"fixed-4-seed{seed}"]["scores"]["sets"]["standard"]["bands"]
        bands["5..8"]["by_depth"]["64"] -= 0.45
    best = analyse(runs, DEPTHS, MAX_OPS, PRIMARY)["extrapolates_best"]
    assert best["schedule"] in ("fixed-4", "uniform-1-16") and not best["holds"]


def _results(runs: dict) -> dict:
    return {"runs": runs, "analysis": analyse(runs, DEPTHS, MAX_OPS, PRIMARY)}


def test_a_rerun_reports_what_moved_and_which_verdicts_turned():
    old = five_seeds()
    new = five_seeds()
    for seed in range(5):  # fixed K=4 falls 0.4 below its old near-band accuracy at K=64
        bands = new[f"fixed-4-seed{seed}"]["scores"]["sets"]["standard"]["bands"]
        bands["5..8"]["by_depth"]["64"] -= 0.4
    comparison = compare(_results(old), _results(new))
    assert comparison["identical_runs"] == 5  # the uniform runs
    assert comparison["max_abs_change"] == pytest.approx(0.4)
    verdicts = {v["claim"]: v for v in comparison["verdicts"]}
    turned = verdicts["fixed-4 vs uniform-1-16: standard near@64"]
    assert (turned["old"], turned["new"], turned["kept"]) == ("positive", "negative", False)
    assert verdicts["uniform-1-16: depth gain on the hard band"]["kept"]
    text = rerun_markdown(comparison, "old", "new")
    assert "| fixed-4 vs uniform-1-16: standard near@64 | positive | negative |" in text
    flipped = sum(1 for v in comparison["verdicts"] if not v["kept"])
    assert f"{len(comparison['verdicts']) - flipped} of {len(comparison['verdicts'])} kept" in text


T_99_4 = 3.747
"""t at which a two-sided p is 0.02 with 4 degrees of freedom (printed t tables)."""
EDGE = [T_99_4 * 0.01 * math.sqrt(0.5) + 0.01 * z for z in (-2, -1, 0, 1, 2)]
"""Per-seed differences with sd 0.01 * sqrt(2.5), so standard error 0.01 * sqrt(0.5), and mean
t = 3.747 standard errors: p = 0.02, inside the uncorrected 95% interval's reach."""


def split_seeds():
    """five_seeds, with fixed K=4 ahead of uniform on the hard band at K=1 by 0.05 (s + 1) in
    seed s (a primary comparison), and on the far band at K=64 by EDGE[s] (exploratory)."""
    runs = five_seeds()
    for seed in range(5):
        fixed = runs[f"fixed-4-seed{seed}"]["scores"]["sets"]["standard"]["bands"]
        fixed["3..4"]["by_depth"]["1"] = 0.1 + 0.05 * (seed + 1)
        fixed["9..12"]["by_depth"]["64"] = 0.1 + EDGE[seed]
    return runs


@pytest.mark.parametrize(
    ("bar", "verdict"),
    [(0.40, "meets the bar"), (0.45, "cannot tell"), (0.80, "below the bar")],
)
def test_a_primary_comparison_is_decided_by_its_own_interval_by_hand(bar, verdict):
    """Uniform's depth gains 0.4..0.8 over five seeds: 0.6 +- 2.776 * 0.0707 = [0.4037, 0.7963],
    at or above 0.40 (meets), across 0.45, under 0.80 (below). Fixed K=4 minus uniform on the
    hard band at K=1: 0.05..0.25, 0.15 +- 2.776 * 0.0354 = [0.0518, 0.2482], above zero; on the
    near band at K=64, 0.2 in every seed."""
    gain = comparison(PRIMARY[0].name, "hard", "uniform-1-16", 16, "uniform-1-16", 1, bar)
    near = comparison("Fixed ahead on near", "near", "fixed-4", 64, "uniform-1-16", 64)
    a = analyse(split_seeds(), DEPTHS, MAX_OPS, [gain, PRIMARY[1], near])
    gain, shallow, near = a["primary"]
    assert gain["difference"]["mean"] == pytest.approx(0.6)
    half = T_975_4 * 0.1 * math.sqrt(0.5)  # sd 0.1 * sqrt(2.5) over sqrt(5) seeds
    assert gain["difference"]["low"] == pytest.approx(0.6 - half)
    assert gain["difference"]["high"] == pytest.approx(0.6 + half)
    assert gain["verdict"] == verdict
    assert shallow["difference"]["mean"] == pytest.approx(0.15)
    assert shallow["difference"]["low"] == pytest.approx(0.15 - T_975_4 * 0.05 * math.sqrt(0.5))
    assert shallow["verdict"] == "higher"
    assert near["difference"]["mean"] == pytest.approx(0.2)  # 0.2 in every seed (five_seeds)
    assert near["verdict"] == "higher"


def test_a_bar_is_met_by_an_interval_whose_lower_end_is_on_it():
    """Uniform gains exactly 0.5 - 0.1 = 0.4 in every seed: the interval is [0.4, 0.4], its lower
    end on the 40-point bar, which "at least 40 points" meets."""
    runs = five_seeds()
    for seed in range(5):
        bands = runs[f"uniform-1-16-seed{seed}"]["scores"]["sets"]["standard"]["bands"]
        bands["3..4"]["by_depth"]["16"] = 0.5
    (gain,) = analyse(runs, DEPTHS, MAX_OPS, PRIMARY[:1])["primary"]
    assert gain["difference"]["low"] == 0.4 == gain["difference"]["high"]
    assert gain["verdict"] == "meets the bar"


def test_holm_turns_a_near_edge_exploratory_difference_to_cannot_tell():
    """The exploratory family of split_seeds, by hand: fixed K=4's depth gain; both schedules'
    extrapolation on near and far; fixed K=4 minus uniform at hard@16, near@64, far@64 (hard@1
    and uniform's gain are primary; "extrapolates best" repeats near@64): 8, of which uniform's
    far extrapolation is zero in every seed and leaves the family: 7. Four are far from zero
    (p ~ 0): the gain, both near extrapolations, near@64. Three exclude zero only uncorrected:
    far@64 and fixed's far extrapolation (EDGE: p = 0.02) and hard@16 (0.4..0.0 over the seeds:
    t = 2.83, p = 0.047). After the four, Holm asks p <= 0.05 / 3."""
    a = analyse(split_seeds(), DEPTHS, MAX_OPS, PRIMARY)
    family = a["exploratory"]
    assert (family["size"], family["zero"], family["uncorrected"], family["corrected"]) == (
        7,
        1,
        7,
        4,
    )
    assert a["extrapolation"]["uniform-1-16"]["far"]["holm"] == "zero in every seed"
    versus = a["versus_reference"]["fixed-4"]["standard"]
    far = versus["far@64"]
    assert far["p"] == pytest.approx(0.02, abs=1e-4)
    assert (far["sign"], far["holm"]) == ("positive", "cannot tell")
    assert (versus["hard@16"]["sign"], versus["hard@16"]["holm"]) == ("positive", "cannot tell")
    assert versus["near@64"]["holm"] == "positive"
    assert "holm" not in versus["hard@1"] and versus["hard@1"]["primary"] == PRIMARY[1].name
    assert a["extrapolates_best"]["holds"]  # near@64 survives the correction


def test_the_report_shows_primary_comparisons_apart_from_the_corrected_rest():
    from fixedfirst.studies.chains.report import findings, primary_findings

    runs = split_seeds()
    for r in runs.values():
        r["label"] = {"fixed-4": "fixed K=4", "uniform-1-16": "uniform 1..16"}[r["schedule"]]
    results = {"runs": runs, "task": {"max_ops": MAX_OPS}}
    results["analysis"] = analyse(runs, DEPTHS, MAX_OPS, PRIMARY)
    assert primary_findings(results) == [
        "Depth decides the answer: uniform 1..16, accuracy on difficulty 3..4 at K=16 minus at "
        "K=1, points, mean over 5 seeds [95% interval]: +60.0 [+40.4, +79.6]; claimed at least "
        "40 points: meets the bar.",
        "Fixed serves shallow: fixed K=4 minus uniform 1..16, accuracy on difficulty 3..4 at "
        "K=1, points, mean over 5 seeds [95% interval]: +15.0 [+5.2, +24.8]; claimed above "
        "zero: higher.",
    ]
    text = "\n".join(findings(results))
    assert "uniform 1..16 +60.0 [+40.4, +79.6] (primary)" in text
    assert "3..4 at K=1 +15.0 [+5.2, +24.8] (primary)" in text
    assert "9..12 at K=64 +2.6 [+0.7, +4.6] (cannot tell; uncorrected higher)" in text
    assert "5..8 at K=64 +20.0 [+20.0, +20.0] (higher)" in text


def differences_with_p(p_table_t: list[float]) -> list[dict]:
    """Same-seed differences over 5 seeds whose t statistics are the given t-table values."""
    se = 0.01
    return [
        {"mean": t * se, "sd": se * math.sqrt(5), "n": 5, "sign": "positive"} for t in p_table_t
    ]


def test_the_family_is_corrected_step_down_with_p_values_from_the_t_table():
    """t = 8.610, 4.604, 3.747 at 4 degrees of freedom are two-sided p = 0.001, 0.01, 0.02:
    Holm rejects all three (0.001 <= 0.05/3, 0.01 <= 0.05/2, 0.02 <= 0.05), where Bonferroni
    (0.05/3 each) would keep the last; three at p = 0.02 are none of them rejected."""
    from fixedfirst.studies.kit.claims import correct_family

    family = differences_with_p([3.747, 8.610, 4.604])
    correct_family(family)
    assert [d["p"] for d in family] == [pytest.approx(p, abs=1e-4) for p in (0.02, 0.001, 0.01)]
    assert [d["holm"] for d in family] == ["positive"] * 3
    family = differences_with_p([3.747] * 3)
    correct_family(family)
    assert [d["holm"] for d in family] == ["cannot tell"] * 3


def test_the_default_preset_names_the_three_primary_comparisons_of_the_page():
    """docs/studies/chains.md, named before the rerun: uniform's accuracy on 5..8 at K=16 minus
    K=1 against 40 points; fixed-first K0=2 minus uniform on 5..8 at K=1 and K0=4 minus uniform
    on 9..16 at K=64, above zero."""
    from fixedfirst.data.registry import kind_options
    from fixedfirst.studies.chains.experiment import load_preset
    from fixedfirst.tasks.chains.bands import ROLES, bands_of

    preset = load_preset("default")
    bands = bands_of(kind_options(preset.run_config("uniform-1-16", 0)))
    labels = dict(zip(ROLES, (b.label for b in bands), strict=True))
    assert [
        (labels[p.of], p.a, p.a_depth, p.b, p.b_depth, p.bar) for p in preset.experiment.primary
    ] == [
        ("5..8", "uniform-1-16", 16, "uniform-1-16", 1, 0.40),
        ("5..8", "fixed-first-2-0.67", 1, "uniform-1-16", 1, None),
        ("9..16", "fixed-first-4-0.8", 64, "uniform-1-16", 64, None),
    ]


def test_a_difference_computed_both_ways_round_counts_once():
    """With uniform ahead on near at K=64 it is the best schedule, and its difference to fixed
    K=4 there is versus_reference's near@64 the other way round: one test, once in the family
    (7, as in split_seeds), rejected or not with it, each keeping its own sign."""
    runs = split_seeds()
    for seed in range(5):
        bands = runs[f"fixed-4-seed{seed}"]["scores"]["sets"]["standard"]["bands"]
        bands["5..8"]["by_depth"]["64"] -= 0.4  # 0.2 below uniform in every seed
    a = analyse(runs, DEPTHS, MAX_OPS, PRIMARY)
    best = a["extrapolates_best"]
    assert best["schedule"] == "uniform-1-16" and best["holds"]
    assert a["exploratory"]["size"] == 7
    versus = a["versus_reference"]["fixed-4"]["standard"]["near@64"]
    against = best["against"]["fixed-4"]
    assert (versus["holm"], against["holm"]) == ("negative", "positive")
    assert versus["p"] == against["p"]
