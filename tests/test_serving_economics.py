"""The serving-economics analysis on summaries made up here, against intervals and verdicts
worked out from the definitions (t quantiles from tables), and the committed config: the fresh
studies' directories, seeds and arms, and the primaries it names. The study end to end on the
chains smoke runs is tests/test_chains_experiment.py's."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from fixedfirst.studies.kit.presets import PAPER_SCHEDULES
from fixedfirst.studies.serving.comparison import analyse
from fixedfirst.studies.serving.report import report_markdown
from fixedfirst.studies.serving.settings import load_economics
from fixedfirst.studies.sweep.spec import load_sweep

ROOT = Path(__file__).resolve().parents[1]
T_975 = {2: 4.302652729911275, 1: 12.706204736174707}
"""Student's t 97.5% quantiles by degrees of freedom (any table)."""


def summary(arm: str, seed: int, saved: float, by_exit: float, rules: dict[str, float]) -> dict:
    by = {}
    for compute, scale in (("iterations", 1.0), ("flops", 0.5)):
        by[compute] = {
            "saved": saved * scale,
            "saved_by_exit": by_exit * scale,
            "cheapest_fixed": round(16 * (1 - saved * scale) / (1 - by_exit * scale)),
            "rules": {r: {"saved": v * scale, "saved_by_exit": 0.0} for r, v in rules.items()},
        }
    return {"arm": arm, "seed": seed, "best_fixed_depth": 16, "by": by}


SAVED = {"ff": [0.50, 0.56, 0.53], "uniform": [0.40, 0.41, 0.45]}
EXITING = {"ff": [0.10, 0.10, 0.10], "uniform": [0.10, 0.10, 0.10]}
KL = {"ff": [0.50, 0.56, 0.53], "uniform": [0.40, 0.41, 0.45]}
ARGMAX = {"ff": [0.30, 0.31, 0.29], "uniform": [0.40, 0.40, 0.44]}


ARMS = {"ff": "ff-run", "uniform": "uniform-run"}


def numbers() -> dict:
    """report.json's numbers for one study of two arms, three seeds each."""
    runs = {
        f"{ARMS[arm]}-seed{seed}": summary(
            arm,
            seed,
            SAVED[arm][seed],
            EXITING[arm][seed],
            {"kl": KL[arm][seed], "argmax": ARGMAX[arm][seed]},
        )
        for arm in SAVED
        for seed in range(3)
    }
    primary = {"name": "p", "study": "s", "a": "ff", "b": "uniform"}
    return {
        "config": "economics.toml",
        "frontier": {
            "exits": {"kl": [0.01], "argmax": [2]},
            "max_depth": 16,
            "seed": 0,
            "sequences": 8,
            "rows": 8,
        },
        "studies": [{"name": "s", "directory": "d", "seeds": [0, 1, 2], "arms": ARMS}],
        "comparisons": [{"a": "ff", "b": "uniform"}],
        "primary": [{**primary, "quantity": "saved", "compute": "iterations"}],
        "runs": {"s": runs},
        "missing": [],
    }


def t_interval(values: list[float]) -> tuple[float, float, float]:
    x = np.array(values)
    half = T_975[len(x) - 1] * x.std(ddof=1) / math.sqrt(len(x))
    return x.mean(), x.mean() - half, x.mean() + half


def test_each_arm_over_seeds_and_the_primary_difference_paired_by_seed():
    a = analyse(numbers())
    arms = a["studies"]["s"]["arms"]
    for arm in SAVED:
        cell = arms[arm]["by"]["iterations"]["saved"]
        assert (cell["mean"], cell["low"], cell["high"]) == pytest.approx(t_interval(SAVED[arm]))
        flops = arms[arm]["by"]["flops"]["saved"]
        assert flops["mean"] == pytest.approx(np.mean(SAVED[arm]) / 2)
    (primary,) = a["primary"]
    differences = [x - y for x, y in zip(SAVED["ff"], SAVED["uniform"], strict=True)]
    mean, low, high = t_interval(differences)
    d = primary["difference"]
    assert (d["mean"], d["low"], d["high"]) == pytest.approx((mean, low, high))
    assert low > 0 and primary["verdict"] == "higher"


def test_the_best_rule_per_arm_and_the_exploratory_family_under_holm():
    a = analyse(numbers())
    arms = a["studies"]["s"]["arms"]
    assert (arms["ff"]["best_rule"], arms["ff"]["runner_up"]) == ("kl", "argmax")
    lead = arms["ff"]["lead"]
    expected = t_interval([k - g for k, g in zip(KL["ff"], ARGMAX["ff"], strict=True)])
    assert (lead["mean"], lead["low"], lead["high"]) == pytest.approx(expected)
    # uniform: kl and argmax differ by 0.00, 0.01, 0.01: an interval across zero
    assert arms["uniform"]["lead"]["sign"] == "cannot tell"
    family = a["exploratory"]
    # ff - uniform in the other three quantities and in the least iterations per token, and
    # each arm's best rule against its runner-up
    assert len(family) == 3 + 1 + 2
    by_name = {(d["a"], d["compute"], d["quantity"]): d for d in family}
    for compute in ("iterations", "flops"):  # both arms exit alike: zero in every seed, left out
        exiting = by_name[("ff", compute, "saved_by_exit")]
        assert exiting["mean"] == 0 and exiting["holm"] == "zero in every seed"
    # the least iterations per token: the best fixed depth (16) times 1 - saved, paired by seed
    least = by_name[("ff", "iterations", "least")]
    expected = t_interval(
        [16 * (u - f) for f, u in zip(SAVED["ff"], SAVED["uniform"], strict=True)]
    )
    assert (least["mean"], least["low"], least["high"]) == pytest.approx(expected)
    ff_lead = by_name[("ff: kl", "iterations", "saved")]
    assert ff_lead["sign"] == "positive" and ff_lead["holm"] in ("positive", "cannot tell")
    # Holm at 5% over the 4 that are not zero: the smallest p must be at most 1.25%, ...
    members = [d for d in family if d["holm"] != "zero in every seed"]
    assert len(members) == 4
    ranked = sorted(members, key=lambda d: d["p"])
    limits = [0.05 / (len(members) - k) for k in range(len(members))]
    first_kept = next((k for k, d in enumerate(ranked) if d["p"] > limits[k]), len(ranked))
    for k, d in enumerate(ranked):
        assert d["holm"] == (d["sign"] if k < first_kept else "cannot tell")


def test_the_report_says_cannot_tell_where_an_interval_holds_zero():
    text = report_markdown(numbers())
    assert "| p | s | ff - uniform | recurrent iterations saved at matched quality |" in text
    assert "| higher |" in text
    row = next(x for x in text.splitlines() if x.startswith("| s | uniform: kl - uniform: argmax"))
    assert row.endswith("| cannot tell | cannot tell |")


def test_one_seed_gives_a_value_without_an_interval_and_no_difference():
    one = numbers()
    one["runs"]["s"] = {k: v for k, v in one["runs"]["s"].items() if v["seed"] == 0}
    a = analyse(one)
    assert a["studies"]["s"]["arms"]["ff"]["by"]["iterations"]["saved"]["low"] is None
    assert a["primary"][0]["difference"] is None and a["exploratory"] == []
    assert "not enough seeds" in report_markdown(one)


def test_the_committed_config_names_the_fresh_studies_and_their_arms():
    config = load_economics(ROOT / "configs" / "serving-economics.toml")
    chains, lm = config.studies
    assert (chains.directory, lm.directory) == ("runs/fresh-chains", "runs/lm-fresh")
    assert chains.seeds == lm.seeds == [100, 101, 102, 103, 104]
    assert set(chains.arms.values()) == set(PAPER_SCHEDULES)
    entries = {
        p.name.rpartition("-seed")[0]
        for p in load_sweep(ROOT / "configs/sweeps/lm-factors.toml").runs
    }
    assert set(lm.arms.values()) <= entries
    assert chains.run_path("fixed K=4", 100) == Path("runs/fresh-chains/runs/fixed-4-seed100")
    assert [(p.within, p.a, p.b) for p in config.primary] == [
        ("chains", "fixed-first K0=2", "uniform"),
        ("chains", "fixed-first K0=4", "uniform"),
        ("language model", "fixed-first K0=2", "uniform"),
        ("language model", "fixed-first K0=4", "uniform"),
    ]
    pairs = {(c.a, c.b) for c in config.comparisons}
    for k0 in ("fixed-first K0=2", "fixed-first K0=4"):
        assert {(k0, "uniform"), (k0, "fixed K=4")} <= pairs
    assert config.frontier.max_depth == 16 and config.frontier.seed == 56
