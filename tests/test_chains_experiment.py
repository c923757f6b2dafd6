"""`fixedfirst chains --preset smoke` end to end: runs at matched FLOPs, scores, figures, report,
reuse, and the task metric through `fixedfirst eval`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fixedfirst.cli.main import main
from fixedfirst.compute import flop_model
from fixedfirst.experiments.chains.experiment import load_preset
from fixedfirst.experiments.presets import PAPER_SCHEDULES
from fixedfirst.schedules import Schedule


@pytest.fixture(scope="module")
def smoke_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("chains") / "smoke"
    with pytest.raises(SystemExit) as e:
        main(["chains", "--preset", "smoke", "--out", str(out), "--quiet"])
    assert e.value.code == 0
    return out


def test_every_schedule_ran_to_the_same_flops(smoke_dir):
    results = json.loads((smoke_dir / "results.json").read_text())
    preset = load_preset("smoke")
    assert {r["schedule"] for r in results["runs"].values()} == set(PAPER_SCHEDULES)
    budget = results["flop_budget"]
    for name, run in results["runs"].items():
        config = preset.run_config(run["schedule"], run["seed"])
        deepest = max(Schedule(config.schedule, config.train.seed).depths(run["steps"] + 1))
        one_step = config.train.tokens_per_step * flop_model(
            config.model, config.train.seq_len
        ).train(deepest)
        assert 0 <= budget - run["flops"] < one_step, name


def test_scores_are_means_over_sequences_and_bands_over_difficulties(smoke_dir):
    results = json.loads((smoke_dir / "results.json").read_text())
    task, depths = results["task"], results["experiment"]["depths"]
    for run in results["runs"].values():
        scores = run["scores"]
        cache = json.loads(
            (smoke_dir / "runs" / f"{run['schedule']}-seed{run['seed']}")
            .joinpath(f"chains-eval-step-{scores['step']:07d}.json")
            .read_text()
        )["scores"]
        for label, band in scores["bands"].items():
            for depth in depths:
                accuracy = scores["accuracy"][str(depth)]
                assert len(accuracy) == task["eval_ops"] + 1
                per_sequence = cache["bands"][label]["per_sequence"][str(depth)]
                expected = np.mean(accuracy[band["low"] : band["high"] + 1])
                assert band["by_depth"][str(depth)]["mean"] == pytest.approx(expected)
                assert np.mean(per_sequence) == pytest.approx(expected, abs=1e-5)
        exit_rule = scores["kl_exit"]
        assert all(1 <= d <= exit_rule["max_depth"] for d in exit_rule["mean_depth"])


def test_report_and_figures_come_from_the_numbers(smoke_dir):
    results = json.loads((smoke_dir / "results.json").read_text())
    report = (smoke_dir / "report.md").read_text()
    a = results["analysis"]
    for name in ("accuracy_by_depth.png", "accuracy_by_difficulty.png", "kl_exit.png"):
        png = (smoke_dir / name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    lines = report.splitlines()
    header = lines.index(next(x for x in lines if x.startswith("| schedule | K |")))
    rows = [x for x in lines[header + 2 :] if x.startswith("|")][: len(a["schedules"]) * 6]
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        schedule = next(r["schedule"] for r in results["runs"].values() if r["label"] == cells[0])
        for band, cell in zip(a["bands"], cells[2:], strict=True):
            spread = a["band_accuracy"][schedule][band["label"]][cells[1]]
            assert cell.startswith(f"{100 * spread['mean']:.1f} (")
    gain = a["depth_gain"]["uniform-1-16"]["seeds"]["0"]
    assert f"{100 * gain['mean']:+.1f} [{100 * gain['low']:+.1f}" in report
    assert "one seed cannot separate schedules" in report


def test_second_invocation_reuses_everything(smoke_dir, capsys):
    before = {p: p.stat().st_mtime_ns for p in smoke_dir.glob("runs/*/*.json")}
    with pytest.raises(SystemExit) as e:
        main(["chains", "--preset", "smoke", "--out", str(smoke_dir)])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.count("reusing the finished run") == len(PAPER_SCHEDULES)
    assert before == {p: p.stat().st_mtime_ns for p in smoke_dir.glob("runs/*/*.json")}


def test_eval_task_chains_on_a_run(smoke_dir, capsys):
    run = smoke_dir / "runs" / "uniform-1-16-seed0"
    with pytest.raises(SystemExit) as e:
        main(["eval", str(run), "--task", "chains", "--depths", "1,4", "--limit", "16"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "| depth | d 0..2 | d 3..4 | d 5..8 | d 9..12 |" in out
    results = json.loads((smoke_dir / "results.json").read_text())
    scores = results["runs"]["uniform-1-16-seed0"]["scores"]
    saved = json.loads(next(run.glob("eval-chains-step-*.json")).read_text())
    assert saved["accuracy"]["4"] == pytest.approx(scores["accuracy"]["4"])


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--set", "experiment.schedules=['cosine']"], "experiment.schedules: choose from"),
        (["--set", "experiment.seeds=[1, 1]"], "experiment.seeds: distinct seeds"),
        (["--set", "data.kind=bios"], "holds options of the data kind 'chains'"),
        (["--set", "data.chains.max_ops=40"], "data.chains.max_ops: must be in"),
    ],
)
def test_bad_preset_input_is_one_line(tmp_path, capsys, args, fragment):
    with pytest.raises(SystemExit) as e:
        main(["chains", "--preset", "smoke", "--out", str(tmp_path / "x"), *args])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1
    assert not (tmp_path / "x").exists()
