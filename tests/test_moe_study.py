"""`fixedfirst moe` and `fixedfirst finishing` on their smoke presets: what their results hold,
that the reports are remade from report.json alone, that a second invocation reuses everything,
and that the finishing preset of the mixture-of-experts trains the moe study's fixed-2 runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixedfirst.cli.main import main
from fixedfirst.config import read_toml
from fixedfirst.runs.directory import RunDir
from fixedfirst.studies.finishing import report as finishing_report
from fixedfirst.studies.kit.depth_tables import FIGURE
from fixedfirst.studies.moe import report as moe_report
from fixedfirst.studies.moe.router_analysis import total_variation
from tests.inkling_helpers import needs_inkling

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
