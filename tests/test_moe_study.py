"""`fixedfirst moe` and `fixedfirst finishing` on their smoke presets: what their results hold,
that the reports are remade from report.json alone, that a second invocation reuses everything,
and that the finishing preset of the mixture-of-experts trains the moe study's fixed-2 runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from fixedfirst.cli.main import main
from fixedfirst.config import LowRankConfig, read_toml
from fixedfirst.data.prepare import PrepareOptions, prepare
from fixedfirst.evaluation.cached import HeldOut, evaluate_run
from fixedfirst.runs.directory import RunDir
from fixedfirst.runs.opening import load_any_run
from fixedfirst.studies.finishing import nll_report
from fixedfirst.studies.finishing import report as finishing_report
from fixedfirst.studies.kit.claims import Claim
from fixedfirst.studies.kit.depth_tables import FIGURE
from fixedfirst.studies.kit.nll_arms import analyse_nll_arms
from fixedfirst.studies.moe import report as moe_report
from fixedfirst.studies.moe.router_analysis import total_variation
from tests.inkling_helpers import inkling_text_toml, needs_inkling

ROOT = Path(__file__).resolve().parents[1]
PRESETS = ROOT / "src/fixedfirst/studies"
RUN_KEYS = {"arm", "seed", "steps", "tokens", "flops", "wall_s", "scores"}


def cli(*args: str) -> int:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    return int(info.value.code or 0)


def check_scores(scores: dict, depths: list[int], eval_ops: int) -> None:
    assert sorted(map(int, scores["accuracy"])) == depths
    for per_difficulty in scores["accuracy"].values():
        assert len(per_difficulty) == eval_ops + 1 and all(0 <= a <= 1 for a in per_difficulty)
    for band in scores["bands"].values():
        assert sorted(map(int, band["by_depth"])) == depths


@needs_inkling
def test_moe_study_scores_every_arm_by_depth_and_measures_its_router(tmp_path, capsys):
    out = tmp_path / "moe"
    arms = 'experiment.schedules=["fixed-first-2-0.67", "uniform-1-6"]'
    args = ["moe", "--preset", "smoke", "--out", str(out), "--jobs", "1", "--set", arms]
    assert cli(*args) == 0
    results = json.loads((out / "results.json").read_text())
    depths = results["experiment"]["depths"]
    assert results["format"] == "fixedfirst-moe-results"
    assert sorted(results["runs"]) == [
        "fixed-first-2-0.67-seed0",
        "fixed-first-2-0.67-seed1",
        "uniform-1-6-seed0",
        "uniform-1-6-seed1",
    ]
    for run in results["runs"].values():
        assert set(run) >= RUN_KEYS and run["flops"] <= results["flop_budget"]
        check_scores(run["scores"], depths, results["task"]["eval_ops"])
        (shares,) = run["router"]["final"]["shares"].values()  # one loop layer
        assert len(shares) == max(depths) and all(sum(p) == pytest.approx(1) for p in shares)
        switch = run["router"]["switch"]
        if run["arm"] == "uniform-1-6":
            assert switch is None and run["switch_step"] is None
        else:  # measured on the checkpoint the trainer saved at the switch
            assert switch["step"] == run["switch_step"] < run["steps"]
    router = results["router"]["fixed-first-2-0.67"]["1"]
    run = results["runs"]["fixed-first-2-0.67-seed1"]["router"]
    moved = total_variation(run["switch"]["shares"]["1"][0], run["final"]["shares"]["1"][0])
    assert router["switch_change"]["1"]["values"]["1"] == pytest.approx(moved)
    assert results["router"]["uniform-1-6"]["1"]["switch_change"] is None
    numbers = json.loads((out / "report.json").read_text())
    assert moe_report.report_markdown(numbers) == (out / "report.md").read_text()
    assert (out / FIGURE).stat().st_size > 0
    capsys.readouterr()
    assert cli(*args) == 0
    assert "trained 0 run(s), reused 4" in capsys.readouterr().out


def test_finishing_study_branches_every_base_at_its_end(tmp_path, capsys):
    out = tmp_path / "finishing"
    args = ["finishing", "--preset", "smoke", "--out", str(out), "--jobs", "1"]
    assert cli(*args) == 0
    results = json.loads((out / "results.json").read_text())
    e = results["experiment"]
    bases = {r["seed"]: r for r in results["runs"].values() if r["arm"] == "base"}
    finishes = [r for r in results["runs"].values() if r["arm"] not in ("base", "continued-0.2")]
    controls = {r["seed"]: r for r in results["runs"].values() if r["arm"] == "continued-0.2"}
    assert sorted(bases) == e["seeds"] and len(finishes) == 2 * 2 * len(e["seeds"])
    assert sorted(controls) == e["seeds"]
    for run in results["runs"].values():
        assert set(run) >= RUN_KEYS
        check_scores(run["scores"], e["depths"], results["task"]["eval_ops"])
    for run in finishes:
        base = bases[run["seed"]]
        extra = round(run["fraction"] * base["steps"])
        assert run["steps"] == base["steps"] + extra
        assert run["finishing_tokens"] == run["tokens"] - base["tokens"] == extra * 4 * 11
        name = f"finish-{run['rate']}-{run['fraction']:g}-seed{run['seed']}"
        saved = RunDir(out / "runs" / name).saved_config()
        assert saved.schedule.k0 == e["depth"] and saved.schedule.k_max == e["k_max"]
        assert saved.train.finishing is not None and saved.train.finishing.lr == run["rate"]
        assert saved.train.finishing.start_step == base["steps"]
    for seed, control in controls.items():  # the base at its own depth, as long as the 20% finish
        finish = results["runs"][f"finish-constant-0.2-seed{seed}"]
        assert (control["steps"], control["tokens"]) == (finish["steps"], finish["tokens"])
        saved = RunDir(out / "runs" / f"continued-0.2-seed{seed}").saved_config()
        assert (saved.schedule.kind, saved.schedule.depth) == ("fixed", e["depth"])
        assert saved.train.finishing is not None and saved.train.finishing.lr == "constant"
        assert saved.train.finishing.start_step == bases[seed]["steps"]
        assert control["flops"] > bases[seed]["flops"]
    numbers = json.loads((out / "report.json").read_text())
    assert finishing_report.report_markdown(numbers) == (out / "report.md").read_text()
    assert "## What finishing buys" in (out / "report.md").read_text()
    assert "| continued at K=2, 20% |" in (out / "report.md").read_text()
    capsys.readouterr()
    assert cli(*args) == 0
    assert "trained 0 run(s), reused 2" in capsys.readouterr().out


def test_the_moe_finishing_bases_are_the_moe_studys_fixed_2_runs():
    moe = read_toml(PRESETS / "moe/presets/default.toml")
    finishing = read_toml(PRESETS / "finishing/presets/moe.toml")
    study = moe.pop("experiment")
    assert (study["seeds"], study["flops"]) == (
        finishing["experiment"]["seeds"],
        finishing["experiment"]["flops"],
    )
    assert (finishing["experiment"]["depth"], finishing["experiment"]["k_max"]) == (2, 6)
    finishing.pop("experiment")
    assert finishing == moe


def nll_runs(values: dict[str, list[float]]) -> dict:
    """Runs of arms on text, arm -> its NLL at depth 1 for seeds 0, 1, 2 (2.0 at depth 2)."""
    return {
        f"{arm}-seed{seed}": {"arm": arm, "seed": seed, "scores": {"nll": {"1": v, "2": 2.0}}}
        for arm, nlls in values.items()
        for seed, v in enumerate(nlls)
    }


def test_held_out_nll_differences_are_decided_by_their_t_interval_over_seeds():
    """Same-seed differences a - b of [0.1, 0.2, 0.3] nats: mean 0.2, sd 0.1, and the 95%
    t-interval 0.2 -/+ 4.3027 x 0.1 / sqrt 3 holds zero (cannot tell); [-0.29, -0.30, -0.31]:
    a predicts the text better (lower); the reference at depth 1 against itself at depth 2."""
    runs = nll_runs(
        {"base": [2.5, 2.6, 2.7], "worse": [2.6, 2.8, 3.0], "better": [2.21, 2.3, 2.39]}
    )
    primary = [
        Claim("worse", a="worse", b="base", of="nll", a_depth=1, b_depth=1),
        Claim("better", a="better", b="base", of="nll", a_depth=1, b_depth=1),
    ]
    a = analyse_nll_arms(runs, [1, 2], "base", [1], primary)
    half = 4.302652729749464 * 0.1 / math.sqrt(3)
    worse, better = (p["difference"] for p in a["primary"])
    assert (worse["mean"], worse["low"], worse["high"]) == pytest.approx(
        (0.2, 0.2 - half, 0.2 + half)
    )
    assert [p["verdict"] for p in a["primary"]] == ["cannot tell", "lower"]
    assert better["mean"] == pytest.approx(-0.3) and better["high"] < 0
    assert a["nll"]["base"]["1"]["mean"] == pytest.approx(2.6)
    assert a["nll"]["base"]["2"]["mean"] == pytest.approx(2.0)
    assert set(a["versus_reference"]) == {"worse", "better"}  # the primaries' cells not in Holm's
    assert a["exploratory"]["size"] == 0


def text_preset(root: Path) -> Path:
    """A finishing preset of the tiny Inkling2Loop on byte text prepared in ROOT/data: bases at
    2 passes (seeds 0, 1), a 50% finish at 1..3, its control and a 50% low-rank finish of rank 4
    (the preset's [train.lowrank]), scored by held-out NLL on 4 rows per seed."""
    rng = np.random.default_rng(0)
    words = ["the", "river", "stone", "lamp", "orbit", "cedar", "quartz", "violet", "harbor"]
    documents = [" ".join(rng.choice(words, size=rng.integers(6, 20))) for _ in range(200)]
    (root / "corpus.txt").write_text("\n%\n".join(documents) + "\n")
    prepare(
        [str(root / "corpus.txt")],
        str(root / "data"),
        PrepareOptions(separator="%", val_fraction=0.1),
    )
    text = inkling_text_toml(str(root / "data"))
    sections = text[text.index("[model]") : text.index("[schedule]")]
    preset = root / "text.toml"
    preset.write_text(
        f"""
[experiment]
flops = 1.2e9
seeds = [0, 1]
depth = 2
k_max = 3
fractions = [0.5]
rates = ["constant"]
controls = [0.5]
lowrank = [0.5]
depths = [1, 2, 3]
compare_depths = [1, 3]
sequences = 4

[[experiment.nll_primary]]
name = "A finish beats as much more training at K = 1"
a = "constant-0.5"
a_depth = 1
b = "continued-0.5"
b_depth = 1

[data]
kind = "tokens"
path = "{root / "data"}"

{sections}
[train]
seq_len = 32
batch_size = 8
lr = 3e-3
final_lr_fraction = 0.1
log_every = 4

[train.lowrank]
rank = 4

[eval]
depths = [1, 2]
batches = 1
"""
    )
    return preset


@needs_inkling
def test_finishing_on_text_scores_held_out_nll_and_finishes_low_rank_from_the_final_weights(
    tmp_path,
):
    from transformers import Inkling2LoopForCausalLM

    out = tmp_path / "finishing"
    assert cli("finishing", "--preset", str(text_preset(tmp_path)), "--out", str(out)) == 0
    results = json.loads((out / "results.json").read_text())
    runs, e = results["runs"], results["experiment"]
    assert results["analysis"]["arms"] == ["base", "constant-0.5", "continued-0.5", "lowrank-0.5"]
    for seed in (0, 1):
        base = RunDir(out / "runs" / f"base-seed{seed}")
        assert base.saved_config().train.lowrank is None  # the adapters are the finishes'
        lowrank = RunDir(out / "runs" / f"finish-lowrank-0.5-seed{seed}").saved_config()
        assert lowrank.train.lowrank == LowRankConfig(rank=4)
        assert (lowrank.schedule.kind, lowrank.schedule.k_max) == ("uniform", 3)
        assert lowrank.train.lr == pytest.approx(3e-4) and lowrank.train.warmup == 0
        steps = runs[f"base-seed{seed}"]["steps"]
        assert runs[f"finish-lowrank-0.5-seed{seed}"]["steps"] == round(0.5 * steps)
        assert (
            runs[f"finish-lowrank-0.5-seed{seed}"]["finishing_tokens"]
            == (runs[f"finish-constant-0.5-seed{seed}"]["finishing_tokens"])
        )
        # It starts from the base's final weights: those transformers reads from its directory.
        weights = Path(lowrank.model.checkpoint)
        assert weights == out / "weights" / f"finish-lowrank-0.5-seed{seed}"
        saved = Inkling2LoopForCausalLM.from_pretrained(weights).state_dict()
        trained = load_any_run(base.path).model.network.state_dict()
        assert saved.keys() == trained.keys()
        assert all(torch.equal(saved[k], trained[k]) for k in saved)
        # Every arm of a seed is scored on the same held-out rows, each seed on its own draw.
        scored = [r["scores"] for r in runs.values() if r["seed"] == seed]
        assert {s["validation_seed"] for s in scored} == {seed}
        assert len({s["validation_sha256"] for s in scored}) == 1
        assert all(sorted(map(int, s["nll"])) == e["depths"] for s in scored)
    rows = {r["seed"]: r["scores"]["validation_sha256"] for r in runs.values()}
    assert rows[0] != rows[1]
    # The base's NLL is the evaluation's own, measured on those rows at its last step.
    evaluation = evaluate_run(
        out / "runs/base-seed0", [1, 3], HeldOut(rows=4, seed=0, precision="fp32")
    )
    assert runs["base-seed0"]["scores"]["nll"]["3"] == pytest.approx(
        evaluation["nll_by_depth"]["3"]
    )
    (primary,) = results["analysis"]["primary"]
    finish, control = (
        [runs[f"{arm}-seed{s}"]["scores"]["nll"]["1"] for s in (0, 1)]
        for arm in ("finish-constant-0.5", "continued-0.5")
    )
    assert primary["difference"]["mean"] == pytest.approx(
        sum(f - c for f, c in zip(finish, control, strict=True)) / 2
    )
    numbers = json.loads((out / "report.json").read_text())
    assert nll_report.report_markdown(numbers) == (out / "report.md").read_text()
    assert "| low-rank, constant, 50% |" in (out / "report.md").read_text()
