"""The chains experiment's rules on hand-made score tables: what counts as solved, the depth chosen
on the selection set, same-seed differences and their verdicts, collapse, "extrapolates best"."""

from __future__ import annotations

import math

import pytest

from fixedfirst.studies.chains.analysis import (
    analyse,
    chosen_depth,
    solved_up_to,
)
from fixedfirst.studies.chains.rerun import compare, rerun_markdown

DEPTHS = [1, 4, 16, 64]
MAX_OPS = 4  # bands 0..2 (easy), 3..4 (hard), 5..8 (near), 9..12 (far)
BANDS = {"easy": (0, 2), "hard": (3, 4), "near": (5, 8), "far": (9, 12)}
T_975_4 = 2.776445105


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


def test_depth_gain_and_its_verdict_by_hand():
    a = analyse(five_seeds(), DEPTHS, MAX_OPS)
    gain = a["depth_gain"]["uniform-1-16"]
    half = T_975_4 * math.sqrt(0.025) / math.sqrt(5)  # sd of 0.4..0.8 in steps of 0.1
    assert gain["mean"] == pytest.approx(0.6)
    assert (gain["low"], gain["high"]) == (pytest.approx(0.6 - half), pytest.approx(0.6 + half))
    assert gain["verdict"] == "reproduced"  # 0.6 - 0.196 > 0.40


def test_same_seed_differences_and_the_best_schedule():
    a = analyse(five_seeds(), DEPTHS, MAX_OPS)
    near = a["versus_reference"]["fixed-4"]["standard"]["near@64"]
    assert near["mean"] == pytest.approx(0.2) and near["sign"] == "positive"
    assert near["high"] - near["low"] == pytest.approx(0.0, abs=1e-12)  # pairing removes seeds
    best = a["extrapolates_best"]
    assert best["schedule"] == "fixed-4" and best["holds"]


def test_collapse_is_found_in_the_seed_where_it_happens():
    a = analyse(five_seeds(), DEPTHS, MAX_OPS)
    collapse = a["collapse"]["fixed-4"]
    assert collapse["collapsed_seeds"] == [2]
    assert collapse["kept"]["min"] == pytest.approx(0.3 / ((3 * 1.0 + 2 * 0.9) / 5))
    assert a["collapse"]["uniform-1-16"]["collapsed_seeds"] == []


def test_best_does_not_hold_when_seeds_disagree():
    runs = five_seeds()
    for seed in (0, 1):  # fixed K=4 below uniform on near at 64 in two seeds
        bands = runs[f"fixed-4-seed{seed}"]["scores"]["sets"]["standard"]["bands"]
        bands["5..8"]["by_depth"]["64"] -= 0.45
    best = analyse(runs, DEPTHS, MAX_OPS)["extrapolates_best"]
    assert best["schedule"] in ("fixed-4", "uniform-1-16") and not best["holds"]


def _results(runs: dict) -> dict:
    return {"runs": runs, "analysis": analyse(runs, DEPTHS, MAX_OPS)}


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
