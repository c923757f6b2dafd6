"""The sweep over seeds: side by side as in one process, held-out rows drawn per seed, the seed
table and the claims' verdicts on hand-computed numbers, and bad claims refused in one line."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from fixedfirst.data.source import GENERATED_ROWS, held_out_rows, in_batches
from fixedfirst.data.synthetic import SyntheticSource
from fixedfirst.evaluation.cached import HeldOut, cached_evaluation
from fixedfirst.evaluation.nll import EVAL_DEPTHS
from fixedfirst.stats.evidence import paired_relative
from fixedfirst.studies.kit.claims import Claim
from fixedfirst.studies.sweep.claims import CLAIMS, claims_markdown, evaluate_claims
from fixedfirst.studies.sweep.results import table_markdown
from fixedfirst.studies.sweep.seed_table import seed_groups, seed_table_markdown
from tests.test_sweep import BASE, assert_one_line_error, run_cli

SWEEP = (
    BASE.replace('kind = "tokens"\npath = "{data}"', 'kind = "synthetic"').replace(
        "tokens = 640", "tokens = 256"
    )
    + """
[sweep]
reference = "uniform"
seeds = [0, 1]
eval_batches = 1

[[runs]]
name = "uniform"
schedule.kind = "uniform"

[[runs]]
name = "ff"
schedule.k0 = 2
"""
)

CLAIM = """
[[claims]]
text = "K0=2: mean serving NLL within 50% of uniform"
a = "ff"
b = "uniform"
metric = "mean"
measure = "relative"
claim = "below"
bound = 0.5
"""


def without_clock(value):
    """A results.json without what the clock and the machine decide (wall-clock, threads)."""
    if isinstance(value, dict):
        return {
            k: without_clock(v)
            for k, v in value.items()
            if not k.startswith("wall") and k not in ("phases", "environment")
        }
    if isinstance(value, list):
        return [without_clock(v) for v in value]
    return value


def refuse(*args, **kwargs):
    raise AssertionError("this process trained or evaluated")


def test_side_by_side_gives_the_numbers_of_one_process(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # equal threads: one per worker, one alone
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(SWEEP + CLAIM)
    results = {}
    for jobs in (2, 1):
        with monkeypatch.context() as patch:
            if jobs == 2:  # the workers train and evaluate; this process only reads
                patch.setattr("fixedfirst.train.trainer.Trainer.train", refuse)
                patch.setattr("fixedfirst.evaluation.cached.evaluate_run", refuse)
            code, stdout, _ = run_cli(
                capsys, "sweep", sweep, "--out", tmp_path / f"j{jobs}", "--jobs", jobs
            )
        assert code == 0, stdout
        assert "trained 4 run(s), reused 0; 4 in the table" in stdout
        assert ("side by side in 2 processes" in stdout) == (jobs == 2)
        results[jobs] = json.loads((tmp_path / f"j{jobs}" / "results.json").read_text())
    assert without_clock(results[2]) == without_clock(results[1])
    side = results[2]
    assert [r["name"] for r in side["runs"]] == [
        "uniform-seed0",
        "uniform-seed1",
        "ff-seed0",
        "ff-seed1",
    ]
    # Each run is compared with the reference entry's run of its own seed.
    assert [r["mean_nll_rel_diff"] for r in side["runs"][:2]] == [0.0, 0.0]
    assert [g["group"] for g in side["groups"]] == ["uniform", "ff"]
    ff = side["groups"][1]
    nll = {r["name"]: r["mean_serving_nll"] for r in side["runs"]}
    ratios = [nll[f"ff-seed{s}"] / nll[f"uniform-seed{s}"] - 1 for s in (0, 1)]
    assert ff["metric_vs_reference"]["mean"] == pytest.approx(sum(ratios) / 2, rel=1e-12)
    (claim,) = side["claims"]
    assert claim["n"] == 2 and claim["mean"] == ff["metric_vs_reference"]["mean"]
    assert claim["high"] == ff["metric_vs_reference"]["high"]
    assert claim["verdict"] == "reproduced"  # about +-10% at 2 seeds, far below 50%
    text = (tmp_path / "j2" / "claims.md").read_text()
    assert (
        "| K0=2: mean serving NLL within 50% of uniform | ff/uniform - 1 of mean serving NLL |"
        in text
    )
    assert "## Over seeds" in (tmp_path / "j2" / "table.md").read_text()

    # Every run of one seed scored the same held-out rows; the two seeds scored different ones.
    evals = {
        r["name"]: json.loads(
            next((tmp_path / "j2" / "runs" / r["name"]).glob("eval-step-*.json")).read_text()
        )
        for r in side["runs"]
    }
    for seed in (0, 1):
        assert evals[f"uniform-seed{seed}"]["validation_seed"] == seed
        assert (
            evals[f"ff-seed{seed}"]["validation_sha256"]
            == evals[f"uniform-seed{seed}"]["validation_sha256"]
        )
    assert evals["ff-seed0"]["validation_sha256"] != evals["ff-seed1"]["validation_sha256"]

    # Again with workers asked for: nothing is left to train, so nothing trains or evaluates.
    monkeypatch.setattr("fixedfirst.train.trainer.Trainer.train", refuse)
    monkeypatch.setattr("fixedfirst.evaluation.cached.evaluate_run", refuse)
    code, stdout, _ = run_cli(capsys, "sweep", sweep, "--out", tmp_path / "j2", "--jobs", 2)
    assert code == 0 and "trained 0 run(s), reused 4; 4 in the table" in stdout
    assert without_clock(json.loads((tmp_path / "j2" / "results.json").read_text())) == (
        without_clock(side)
    )


def test_the_cache_knows_which_rows_it_scored(tmp_path, text_run):
    """A drawn evaluation is reused for its seed only; a split smaller than asked for is scored
    whole, in batches of the run's batch size, and says so."""
    run = tmp_path / "run"  # a copy: the shared run's files stay as other tests left them
    shutil.copytree(text_run / "run", run)
    first, reused = cached_evaluation(run, [1, 4], HeldOut(batches=2, seed=3))
    assert not reused and first["validation_seed"] == 3 and first["sequences"] == 16
    assert cached_evaluation(run, [1, 4], HeldOut(batches=2, seed=3)) == (first, True)
    fixed, reused = cached_evaluation(run, [1, 4], HeldOut(batches=2))
    assert not reused and fixed["validation_seed"] is None
    assert fixed["validation_sha256"] != first["validation_sha256"]
    other, reused = cached_evaluation(run, [1, 4], HeldOut(batches=2, seed=4))
    assert not reused and other["validation_sha256"] != first["validation_sha256"]

    everything, _ = cached_evaluation(run, [1, 4], HeldOut(batches=10_000, seed=3))
    from fixedfirst.data.tokens import TokenSource

    windows = len(TokenSource(text_run / "data", 64).val)
    assert everything["sequences"] == windows < 10_000 * everything["batch_size"]
    again, _ = cached_evaluation(run, [1, 4], HeldOut(batches=10_000, seed=4))
    assert again["validation_sha256"] != everything["validation_sha256"]  # same rows, new order
    assert again["nll_by_depth"] == pytest.approx(everything["nll_by_depth"], rel=1e-5)


T_975_2 = 4.302652729911275
"""Student's t quantile 0.975 with 2 degrees of freedom (printed tables: 4.303)."""

NLL = {"uniform": [2.0, 2.2, 2.4], "ff": [2.02, 2.2, 2.472]}
"""Mean serving NLL of each entry's seeds 0, 1, 2 (the rows put them at every depth 1..16, but
+0.3 at K=1 and -0.3 at K=2, and +0.5 at K=64)."""


def hand_row(group: str, seed: int, nll: float, wall: float, savings: float) -> dict:
    by_depth = {str(d): nll for d in EVAL_DEPTHS}
    by_depth.update({"1": nll + 0.3, "2": nll - 0.3, "64": nll + 0.5})
    return {
        "name": f"{group}-seed{seed}",
        "group": group,
        "seed": seed,
        "schedule": group,
        "tokens": 640,
        "modeled_flops": 1e9,
        "flop_budget": None,
        "modeled_savings": savings,
        "wall": wall,
        "wall_savings": None,
        "mean_serving_nll": nll,
        "mean_nll_rel_diff": None,
        "nll_by_depth": by_depth,
        "eval_tokens": 128,
        "eval_sequences": 5,
        "eval_sequences_asked": 8,
        "validation_seed": seed,
    }


def hand_rows() -> list[dict]:
    walls = {"uniform": [10.0, 12.0, 14.0], "ff": [6.0, 6.0, 6.0]}
    savings = {"uniform": 0.0, "ff": 0.45}
    return [
        hand_row(group, seed, NLL[group][seed], walls[group][seed], savings[group])
        for group in ("uniform", "ff")
        for seed in range(3)
    ]


def cells(line: str) -> list[str]:
    """The cells of a Markdown table row."""
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def assert_interval(summary: dict, mean: float, low: float, high: float) -> None:
    assert (summary["mean"], summary["low"], summary["high"]) == pytest.approx(
        (mean, low, high), abs=1e-9
    )


def test_seed_table_against_hand_computed_intervals():
    uniform, ff = seed_groups(hand_rows(), "uniform", "nll")
    half = T_975_2 * 0.2 / math.sqrt(3)  # sd of 2.0, 2.2, 2.4 is 0.2
    assert_interval(uniform["metric"], 2.2, 2.2 - half, 2.2 + half)
    assert_interval(uniform["by_depth"]["1"]["over_seeds"], 2.5, 2.5 - half, 2.5 + half)
    assert_interval(uniform["by_depth"]["64"]["over_seeds"], 2.7, 2.7 - half, 2.7 + half)
    assert_interval(uniform["wall"], 12.0, 12.0 - 10 * half, 12.0 + 10 * half)  # sd 2
    assert uniform["metric_vs_reference"] is None and uniform["wall_savings"] == 0.0
    assert uniform["n"] == ff["n"] == 3 and ff["seeds"] == [0, 1, 2]
    # Per seed, ff / uniform - 1 = 0.01, 0, 0.03: mean 0.013333, sd 0.0152753.
    assert_interval(
        ff["metric_vs_reference"], 0.013333333333333345, -0.024612497004061346, 0.05127916367072803
    )
    # At K=64 (2.52/2.5, 2.7/2.7, 2.972/2.9): 0.008, 0, 0.0248276.
    assert_interval(
        ff["by_depth"]["64"]["vs_reference"],
        0.010942528735632173,
        -0.02053808469489138,
        0.042423142166155725,
    )
    assert ff["wall_savings"] == pytest.approx(0.5) and ff["modeled_savings"] == 0.45
    assert ff["wall"]["low"] == ff["wall"]["high"] == 6.0
    assert set(ff["by_depth"]) == {"1", "4", "16", "64"}

    table = seed_table_markdown([uniform, ff], "uniform", "nll", None)
    assert "drawn per seed" in table
    shared = seed_table_markdown([uniform, ff], "uniform", "nll", None, shared_rows=True)
    assert "drawn once" in shared and "drawn per seed" not in shared
    rows = {cells(line)[0]: cells(line) for line in table.splitlines()[2:4]}
    assert rows["ff"][:7] == [
        "ff", "3", "45.0%", "6.0 [6.0, 6.0]", "50.0%", "2.2307 [1.6654, 2.7959]",
        "+1.33% [-2.46, +5.13]",
    ]  # fmt: skip
    assert rows["ff"][-2:] == ["2.7307 [2.1654, 3.2959]", "+1.09% [-2.05, +4.24]"]  # K=64
    assert rows["**uniform** (reference)"][1:7] == [
        "3", "0.0%", "12.0 [7.0, 17.0]", "0.0%", "2.2000 [1.7032, 2.6968]", "–",
    ]  # fmt: skip
    per_run = table_markdown(hand_rows(), "uniform-seed0", [], same_seed=True)
    assert "of the same seed" in per_run
    # One shared set (every row drawn by the same seed): the legend says so, not "each run's".
    rows = [{**r, "validation_seed": 7} for r in hand_rows()]
    shared = table_markdown(rows, "uniform-seed0", [], same_seed=True, shared_rows=True)
    assert "drawn once from the whole validation split (by seed 7)" in shared
    assert "by each run's seed" not in shared
    assert "by each run's seed" in table_markdown(rows, "uniform-seed0", [], same_seed=True)
    assert (
        "holds only 5 sequences, fewer than the evaluation asked for: all of it was scored"
        in per_run
    )


def claim(**keys) -> Claim:
    """A [[claims]] table as a sweep file writes one."""
    values = dict(
        text="t", a="ff", b="uniform", metric="mean", measure="relative", claim="below", bound=0.05
    )
    values.update(keys)
    return CLAIMS.read(values)


def test_claims_get_their_verdicts_from_hand_computed_intervals():
    rows = hand_rows()
    # Relative, mean serving NLL: +1.33% in [-2.46%, +5.13%].
    cases = [
        (claim(bound=0.05), "cannot tell"),  # the interval straddles 5%
        (claim(bound=0.06), "reproduced"),  # wholly below 6%
        (claim(claim="above", bound=0.06), "not reproduced"),
        (claim(claim="above", bound=-0.03), "reproduced"),
        # Differences at K=64: 0.02, 0, 0.072 -> 0.030667 in [-0.061660, 0.122993].
        (claim(metric="depth:64", measure="difference", bound=0.2), "reproduced"),
        (claim(metric="depth:64", measure="difference", claim="above", bound=0.0), "cannot tell"),
    ]
    # Each a family of its own (so no correction: Holm over 1 is the claim's own interval).
    results = [evaluate_claims([c], rows, "nll", None)[0] for c, _ in cases]
    assert [r["verdict"] for r in results] == [v for _, v in cases]
    assert all(r["family"] == "primary, Holm over 1" for r in results)
    assert (results[0]["mean"], results[0]["low"], results[0]["high"]) == pytest.approx(
        (0.013333333333333345, -0.024612497004061346, 0.05127916367072803), abs=1e-9
    )
    assert (results[4]["mean"], results[4]["low"], results[4]["high"]) == pytest.approx(
        (0.030666666666666693, -0.06165952331627644, 0.12299285664960982), abs=1e-9
    )
    assert results[4]["quantity"] == "ff - uniform of NLL at K=64"
    assert all(r["n"] == 3 and r["seeds"] == [0, 1, 2] for r in results)

    one_seed = [r for r in rows if r["group"] == "uniform" or r["seed"] == 1]
    (single,) = evaluate_claims([claim(measure="difference")], one_seed, "nll", None)
    assert single["n"] == 1 and single["mean"] == 0.0 and single["low"] is None
    assert single["verdict"] == "cannot tell"

    lines = claims_markdown([results[0], results[1], single], "nll").splitlines()
    assert cells(lines[2]) == [
        "t", "ff/uniform - 1 of mean serving NLL", "+1.33%", "[-2.46%, +5.13%]", "3",
        "below +5.00%", "**cannot tell at 3 seeds** (primary, Holm over 1)",
    ]  # fmt: skip
    assert cells(lines[3])[-2:] == ["below +6.00%", "**reproduced** (primary, Holm over 1)"]
    assert cells(lines[4]) == [
        "t", "ff - uniform of mean serving NLL", "+0.0000", "–", "1", "below +0.0500",
        "**cannot tell at 1 seed**",
    ]  # fmt: skip
    # Rows drawn per seed: the legend says so; one shared set scored by every run: the legend
    # says the crossed interval covers its rows, and never that they were drawn per seed.
    own_rows = claims_markdown(results[:2], "nll").splitlines()[-1]
    assert "drawn per seed" in own_rows and "crossed" not in own_rows
    crossed = [{**r, "covers": "seeds and held-out blocks"} for r in results[:2]]
    shared = claims_markdown(crossed, "nll").splitlines()[-1]
    assert "crossed over the seeds and the shared held-out set's blocks" in shared
    assert "drawn once" in shared and "drawn per seed" not in shared


T_975_2 = 4.302652730


def test_a_tables_claims_are_corrected_together_primary_and_exploratory_apart():
    """Differences at K=64 are 0.02, 0, 0.072 per seed: mean 0.030667, standard error 0.021419.
    Against a bound of -0.06 (claimed above) the t is 4.2326, p = 0.0516 two-sided with 2
    degrees of freedom (by the t table: t = 4.3027 gives 0.05), and against -0.10 it is 6.1000,
    p ~ 0.026. Alone, -0.10 is reproduced (its interval [-0.0617, 0.1230] lies above); with a
    second primary claim, Holm over 2 wants p <= 0.025 first: the smaller p, 0.026, fails, and
    every primary claim becomes "cannot tell". An exploratory claim is a family apart: it does
    not count against the primaries. The caveat is printed beside the verdict."""
    rows = hand_rows()
    k64 = dict(metric="depth:64", measure="difference", claim="above")
    strong, weak = claim(**k64, bound=-0.10), claim(**k64, bound=-0.06)
    se = 0.021419
    assert (0.030667 + 0.06) / se < T_975_2 < (0.030667 + 0.10) / se
    (alone,) = evaluate_claims([strong], rows, "nll", None)
    assert alone["verdict"] == "reproduced" and alone["p"] == pytest.approx(0.026, abs=1e-3)
    both = evaluate_claims([strong, weak], rows, "nll", None)
    assert [r["verdict"] for r in both] == ["cannot tell", "cannot tell"]
    assert [r["family"] for r in both] == ["primary, Holm over 2"] * 2
    apart = evaluate_claims(
        [strong, claim(**k64, bound=-0.06, primary=False, caveat="a weak baseline")],
        rows,
        "nll",
        None,
    )
    assert apart[0]["verdict"] == "reproduced" and apart[0]["family"] == "primary, Holm over 1"
    assert apart[1]["family"] == "exploratory, Holm over 1" and apart[1]["caveat"]
    line = claims_markdown(apart, "nll").splitlines()[3]
    assert cells(line)[-1] == (
        "**cannot tell at 3 seeds** (exploratory, Holm over 1) (a weak baseline)"
    )


def test_paired_relative_takes_each_seeds_ratio_first():
    a, b = {0: 2.02, 1: 2.2, 2: 2.472, 7: 9.0}, {0: 2.0, 1: 2.2, 2: 2.4}
    interval = paired_relative(a, b)  # seed 7 has no partner and is left out
    assert interval.n == 3
    assert (interval.mean, interval.low, interval.high) == pytest.approx(
        (0.013333333333333345, -0.024612497004061346, 0.05127916367072803), abs=1e-9
    )
    # Not the ratio of the means: 2.230667 / 2.2 - 1 = 0.013939.
    assert interval.mean != pytest.approx(0.013939393939393847, abs=1e-4)
    with pytest.raises(ValueError, match="at least 2 seeds"):
        paired_relative({0: 1.0, 1: 2.0}, {1: 2.0})
    with pytest.raises(ValueError, match="b\\[s\\] != 0"):
        paired_relative({0: 1.0, 1: 2.0}, {0: 0.0, 1: 2.0})


def test_a_relative_claim_against_a_zero_score_cannot_tell():
    rows = [
        {**hand_row(g, s, 1.0, 1.0, 0.0), "task_scores": {str(d): score for d in EVAL_DEPTHS}}
        for g, scores in (("uniform", [0.0, 0.2]), ("ff", [0.1, 0.3]))
        for s, score in enumerate(scores)
    ]
    (result,) = evaluate_claims([claim(claim="above", bound=0.0)], rows, "task", "accuracy")
    assert result["verdict"] == "cannot tell" and result["mean"] is None
    assert result["quantity"] == "ff/uniform - 1 of mean accuracy over K=1..16"
    assert "uniform scored 0 for a seed" in claims_markdown([result], "task")
    ff = seed_groups(rows, "uniform", "task")[1]
    assert ff["metric_vs_reference"] is None and ff["metric"]["mean"] == pytest.approx(0.2)
    (difference,) = evaluate_claims(
        [claim(measure="difference", claim="above", bound=0.0)], rows, "task", "accuracy"
    )
    assert (difference["mean"], difference["low"], difference["high"]) == pytest.approx(
        (0.1, 0.1, 0.1)
    )  # the same difference at both seeds: no spread
    assert difference["verdict"] == "reproduced"


def draw(source, batches: int, seed: int | None) -> list:
    return [
        (b.inputs.tolist(), b.targets.tolist()) for b in source.validation_batches(batches, 4, seed)
    ]


def test_drawn_validation_rows_differ_between_seeds_and_not_between_arms():
    # Two arms of one seed build their sources from the same data settings.
    arm_a, arm_b = SyntheticSource(48, 16, seed=0), SyntheticSource(48, 16, seed=0)
    assert draw(arm_a, 2, 0) == draw(arm_b, 2, 0)
    assert draw(arm_a, 2, 0) != draw(arm_a, 2, 1)
    assert draw(arm_a, 2, 0) != draw(arm_a, 2, None)
    assert draw(arm_a, 2, None) == draw(arm_b, 2, None)  # the fixed first rows, as before
    assert draw(arm_a, 1, 0) == draw(arm_a, 2, 0)[:1]  # fewer rows: the first of the longer draw


def test_the_task_sources_draw_their_validation_rows_by_seed_too():
    from fixedfirst.tasks.bios.source import BiosSource, bios_seq_len
    from fixedfirst.tasks.bios.world import BiosOptions, build_world
    from fixedfirst.tasks.chains.program import ChainsOptions
    from fixedfirst.tasks.chains.source import ChainsSource

    people = BiosOptions(people=12, first_names=5, middle_names=5, last_names=5, cities=7)
    world = build_world(people)
    chains = ChainsOptions(statements=24, values=16, max_ops=5, eval_ops=15)
    for make in (
        lambda: BiosSource(world, bios_seq_len(people), order_seed=3),
        lambda: ChainsSource(chains, chains.seq_len, data_seed=0, order_seed=3),
    ):
        assert draw(make(), 2, 0) == draw(make(), 2, 0)
        assert draw(make(), 2, 0) != draw(make(), 2, 1)
        assert draw(make(), 2, 0) != draw(make(), 2, None)
        assert draw(make(), 1, 1) == draw(make(), 2, 1)[:1]


def test_held_out_rows_are_distinct_and_all_of_a_smaller_set():
    rows = held_out_rows(50, seed=0)
    assert len(set(rows)) == 50 and all(0 <= r < GENERATED_ROWS for r in rows)
    assert held_out_rows(20, seed=0) == rows[:20]
    finite = held_out_rows(7, seed=0, population=10)
    assert len(set(finite)) == 7 and set(finite) <= set(range(10))
    assert held_out_rows(3, seed=0, population=10) == finite[:3]
    assert sorted(held_out_rows(25, seed=1, population=10)) == list(range(10))
    assert in_batches(range(10), 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


BAD_CLAIMS = {
    "unknown entry": (
        CLAIM.replace('a = "ff"', 'a = "ff-k3"'),
        ["claims[0]: a = 'ff-k3' is not a [[runs]] entry; entries: uniform, ff"],
    ),
    "unknown key": (CLAIM + "direction = 1\n", ["claims[0]: unknown key claims.direction"]),
    "missing key": (CLAIM.replace("bound = 0.5\n", ""), ["claims[0]: missing key claims.bound"]),
    "bad metric": (
        CLAIM.replace('metric = "mean"', 'metric = "depth:20"'),
        ["claims.metric: 'depth:20': use \"mean\"", "1, 2, 3"],
    ),
    "bad measure": (
        CLAIM.replace('"relative"', '"ratio"'),
        ["claims.measure: 'ratio' is not one of"],
    ),
    "bad side": (
        CLAIM.replace('claim = "below"', 'claim = "under"'),
        ["claims.claim: 'under' is not one of"],
    ),
    "bound not a number": (
        CLAIM.replace("bound = 0.5", 'bound = "0.5%"'),
        ["claims.bound: expected a number"],
    ),
    "same entry twice": (
        CLAIM.replace('a = "ff"', 'a = "uniform"'),
        ["a and b both name 'uniform'"],
    ),
    "no seeds": (None, ["[[claims]] are decided by intervals over seeds"]),
}


@pytest.mark.parametrize("case", list(BAD_CLAIMS))
def test_bad_claims_are_one_line_errors_and_write_nothing(tmp_path, capsys, case):
    claims, fragments = BAD_CLAIMS[case]
    text = SWEEP + claims if claims is not None else SWEEP.replace("seeds = [0, 1]\n", "") + CLAIM
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(text)
    code, _, err = run_cli(capsys, "sweep", sweep, "--out", tmp_path / "out")
    assert_one_line_error(code, err, "sweep", *fragments)
    assert not (tmp_path / "out").exists()
