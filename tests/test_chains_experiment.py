"""`fixedfirst chains --preset smoke` end to end: runs at matched FLOPs, scores, figures, report,
reuse, and the task metric through `fixedfirst eval`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fixedfirst.cli.main import main
from fixedfirst.compute.flops import flop_model
from fixedfirst.schedules import Schedule
from fixedfirst.studies.chains.experiment import load_preset
from fixedfirst.studies.chains.figure import FIGURES
from fixedfirst.studies.chains.report import primary_findings, report_markdown
from fixedfirst.studies.kit.presets import PAPER_SCHEDULES
from tests.report_checks import assert_report_remade

SMOKE_SETTINGS = ["experiment.flops=2e9"]
"""The smoke preset at a sixth of its FLOP budget (8 to 20 steps a run): training was most of
the experiment's time, and nothing here needs the runs to learn, only to be compute-matched,
scored and reported."""
SMOKE = ["chains", "--preset", "smoke", *(a for s in SMOKE_SETTINGS for a in ("--set", s))]


@pytest.fixture(scope="module")
def smoke_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("chains") / "smoke"
    with pytest.raises(SystemExit) as e:
        main([*SMOKE, "--out", str(out), "--quiet"])
    assert e.value.code == 0
    return out


def test_every_schedule_ran_to_the_same_flops(smoke_dir):
    results = json.loads((smoke_dir / "results.json").read_text())
    preset = load_preset("smoke", SMOKE_SETTINGS)
    assert {r["schedule"] for r in results["runs"].values()} == set(PAPER_SCHEDULES)
    budget = results["flop_budget"]
    for name, run in results["runs"].items():
        config = preset.run_config(run["schedule"], run["seed"])
        deepest = max(Schedule(config.schedule, config.train.seed).depths(run["steps"] + 1))
        one_step = config.train.tokens_per_step * flop_model(
            config.model, config.train.seq_len
        ).train(deepest)
        assert 0 <= budget - run["flops"] < one_step, name


def test_band_scores_are_means_over_their_difficulties_on_every_set(smoke_dir):
    results = json.loads((smoke_dir / "results.json").read_text())
    task, e = results["task"], results["experiment"]
    for run in results["runs"].values():
        scores = run["scores"]
        assert list(scores["sets"]) == e["sets"]
        for name, scored in scores["sets"].items():
            expected_ops = task["statements"] - 1 if name == "longest" else task["eval_ops"]
            assert scored["eval_ops"] == expected_ops
            assert scored["sequences"] == (
                e["sequences"] if name == "standard" else e["set_sequences"]
            )
            for band in scored["bands"].values():
                for depth in e["depths"]:
                    accuracy = scored["accuracy"][str(depth)]
                    assert len(accuracy) == expected_ops + 1
                    expected = np.mean(accuracy[band["low"] : band["high"] + 1])
                    assert band["by_depth"][str(depth)] == pytest.approx(expected)
        exit_rule = scores["kl_exit"]
        assert all(1 <= d <= exit_rule["max_depth"] for d in exit_rule["mean_depth"])


def test_each_seed_has_its_own_evaluation_draw_shared_by_its_schedules(smoke_dir):
    results = json.loads((smoke_dir / "results.json").read_text())
    by_seed = {}
    for run in results["runs"].values():
        by_seed.setdefault(run["seed"], set()).add(run["scores"]["evaluation_seed"])
    assert all(len(draws) == 1 for draws in by_seed.values())
    assert len({next(iter(d)) for d in by_seed.values()}) == len(by_seed)


def test_analysis_is_computed_from_the_seeds_scores(smoke_dir):
    results = json.loads((smoke_dir / "results.json").read_text())
    a = results["analysis"]
    runs = results["runs"]
    hard = a["sets"]["standard"]["bands"]["hard"]["label"]

    def accuracy(schedule, seed, depth):
        bands = runs[f"{schedule}-seed{seed}"]["scores"]["sets"]["standard"]["bands"]
        return bands[hard]["by_depth"][str(depth)]

    for schedule in a["schedules"]:
        gains = [accuracy(schedule, s, 16) - accuracy(schedule, s, 1) for s in a["seeds"]]
        assert a["depth_gain"][schedule]["mean"] == pytest.approx(np.mean(gains))
        cell = a["band_accuracy"][schedule]["standard"]["hard"]["16"]
        assert cell["mean"] == pytest.approx(
            np.mean([accuracy(schedule, s, 16) for s in a["seeds"]])
        )
    versus = a["versus_reference"]["fixed-4"]["standard"]["hard@16"]
    differences = [accuracy("fixed-4", s, 16) - accuracy("uniform-1-16", s, 16) for s in a["seeds"]]
    assert versus["mean"] == pytest.approx(np.mean(differences))
    assert versus["n"] == len(a["seeds"]) == 2


def test_report_and_figures_come_from_the_numbers(smoke_dir):
    results = json.loads((smoke_dir / "results.json").read_text())
    report = (smoke_dir / "report.md").read_text()
    a = results["analysis"]
    for name in FIGURES:
        png = (smoke_dir / name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    lines = report.splitlines()
    header = lines.index(next(x for x in lines if x.startswith("| schedule | K |")))
    rows = [x for x in lines[header + 2 :] if x.startswith("|")][: len(a["schedules"]) * 6]
    roles = list(a["sets"]["standard"]["bands"])
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        schedule = next(r["schedule"] for r in results["runs"].values() if r["label"] == cells[0])
        for role, cell in zip(roles, cells[2:], strict=True):
            c = a["band_accuracy"][schedule]["standard"][role][cells[1]]
            assert cell == f"{100 * c['mean']:.1f} [{100 * c['low']:.1f}, {100 * c['high']:.1f}]"
    gain = a["depth_gain"]["uniform-1-16"]
    assert (
        f"{100 * gain['mean']:+.1f} [{100 * gain['low']:+.1f}, {100 * gain['high']:+.1f}] "
        "(primary)" in report
    )


def test_the_report_splits_primary_comparisons_from_the_corrected_rest(smoke_dir):
    """The preset's three primary comparisons, each its own interval and verdict, in their own
    section; the exploratory section names the family Holm corrects, every difference the
    analysis computes but the primary ones, each counted once."""
    results = json.loads((smoke_dir / "results.json").read_text())
    report = (smoke_dir / "report.md").read_text()
    a = results["analysis"]
    assert [p["name"] for p in a["primary"]] == [
        p.name for p in load_preset("smoke", SMOKE_SETTINGS).experiment.primary
    ]
    section = report[report.index("## Primary comparisons") : report.index("## What else")]
    assert [x for x in section.splitlines() if x.startswith("- ")] == [
        f"- {s}" for s in primary_findings(results)
    ]
    gain = a["primary"][0]
    assert gain["difference"]["mean"] == pytest.approx(a["depth_gain"]["uniform-1-16"]["mean"])
    assert "claimed at least 40 points: " + gain["verdict"] in section
    versus = a["versus_reference"]
    differences = [
        *a["depth_gain"].values(),
        *(d for per_band in a["extrapolation"].values() for d in per_band.values()),
        *(d for per_set in versus.values() for cells in per_set.values() for d in cells.values()),
    ]
    exploratory = [d for d in differences if d is not None and "primary" not in d]
    assert sum("primary" in d for d in differences if d is not None) == 3
    # "extrapolates best" adds the best schedule against each other one: new pairs unless it is
    # uniform (then every one is a matched-FLOP difference above), and one of them is uniform
    best = a["extrapolates_best"]
    new = 0 if best["schedule"] == "uniform-1-16" else len(a["schedules"]) - 2
    # a difference zero in every seed is counted apart from the family Holm corrects
    assert a["exploratory"]["size"] + a["exploratory"]["zero"] == len(exploratory) + new
    assert f"## What else the numbers show: exploratory (Holm over {a['exploratory']['size']})" in (
        report
    )
    assert all(d["holm"] in (d["sign"], "cannot tell", "zero in every seed") for d in exploratory)


def test_report_is_remade_from_report_json_alone(smoke_dir, tmp_path):
    """report.json holds the runs' costs and the scores the analysis reads (not the analysis,
    nor the other sets' accuracy by difficulty): report.md is analysed and written again from
    it, and from results.json, to the byte."""
    results = json.loads((smoke_dir / "results.json").read_text())
    numbers = json.loads((smoke_dir / "report.json").read_text())
    assert "analysis" not in numbers and numbers["runs"].keys() == results["runs"].keys()
    for run in numbers["runs"].values():
        assert [n for n, s in run["scores"]["sets"].items() if "accuracy" in s] == ["standard"]
    assert_report_remade(smoke_dir, report_markdown, report_markdown(results), tmp_path)


def test_second_invocation_reuses_everything(smoke_dir, capsys):
    before = {p: p.stat().st_mtime_ns for p in smoke_dir.glob("runs/*/*.json")}
    with pytest.raises(SystemExit) as e:
        main([*SMOKE, "--out", str(smoke_dir)])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.count("reusing the finished run") == 2 * len(PAPER_SCHEDULES)
    assert before == {p: p.stat().st_mtime_ns for p in smoke_dir.glob("runs/*/*.json")}


def test_compare_with_an_identical_run_keeps_every_verdict(smoke_dir, capsys):
    with pytest.raises(SystemExit) as e:
        main([*SMOKE, "--out", str(smoke_dir), "--compare", str(smoke_dir)])
    assert e.value.code == 0
    text = (smoke_dir / "rerun.md").read_text()
    verdicts = len(json.loads((smoke_dir / "results.json").read_text())["runs"])
    assert f"Runs with identical scores: {verdicts}." in text
    assert "turned around" in text and " 0 turned around" in text
    assert "verdicts kept" in capsys.readouterr().out


def test_compare_needs_an_experiment_there(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["chains", "--preset", "smoke", "--out", str(tmp_path / "x"), "--compare", "/nope"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--compare /nope: cannot read" in err and err.count("\n") == 1
    assert not (tmp_path / "x").exists()


def test_eval_task_chains_on_a_run(smoke_dir, capsys):
    run = smoke_dir / "runs" / "uniform-1-16-seed0"
    with pytest.raises(SystemExit) as e:
        main(["eval", str(run), "--task", "chains", "--depths", "1,4", "--limit", "16"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "| depth | d 0..2 | d 3..4 | d 5..8 | d 9..12 |" in out
    results = json.loads((smoke_dir / "results.json").read_text())
    scores = results["runs"]["uniform-1-16-seed0"]["scores"]["sets"]["standard"]
    saved = json.loads(next(run.glob("eval-chains-step-*.json")).read_text())
    assert saved["accuracy"]["4"] == pytest.approx(scores["accuracy"]["4"])


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--set", "experiment.schedules=['cosine']"], "experiment.schedules: choose from"),
        (["--set", "experiment.seeds=[1, 1]"], "experiment.seeds: distinct seeds"),
        (["--set", "data.kind=bios"], "holds options of the data kind 'chains'"),
        (["--set", "data.chains.max_ops=40"], "data.chains.max_ops: must be in"),
        (
            ["--set", "experiment.depths=[1, 2, 4, 16]"],
            "experiment.primary[2]: primary.a_depth: 32 (Fixed-first extrapolates further) is not",
        ),
        (["--set", "experiment.primary=[1]"], "experiment.primary[0]: expected a table"),
    ],
)
def test_bad_preset_input_is_one_line(tmp_path, capsys, args, fragment):
    with pytest.raises(SystemExit) as e:
        main(["chains", "--preset", "smoke", "--out", str(tmp_path / "x"), *args])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1
    assert not (tmp_path / "x").exists()


ECONOMICS = """
[frontier]
max_depth = 4
sequences = 8
speed_rows = 2
speed_tokens = 4
speed_repeats = 1

[frontier.exits]
kl = [1e-2]
argmax = [2]

[[studies]]
name = "smoke"
directory = "{directory}"
seeds = [0, 1, 2]

[studies.arms]
"uniform" = "uniform-1-16"
"fixed K=4" = "fixed-4"
"fixed-first K0=2" = "fixed-first-2-0.67"

[[comparisons]]
a = "fixed-first K0=2"
b = "uniform"

[[comparisons]]
a = "fixed-first K0=2"
b = "fixed K=4"

[[primary]]
name = "K0=2 stops as well as uniform"
study = "smoke"
a = "fixed-first K0=2"
b = "uniform"
"""
ARMS = {"uniform": "uniform-1-16", "fixed K=4": "fixed-4", "fixed-first K0=2": "fixed-first-2-0.67"}


def test_serving_economics_on_the_smoke_runs(smoke_dir, tmp_path):
    """`fixedfirst serving-economics` over the smoke runs: every finished run's frontier, the
    runs of a seed the experiment did not train listed as missing, each run's summary what its
    frontier gives (read here from the points), the report made from report.json alone, a
    second invocation that reuses every frontier, and --jobs 2 measuring the same ones."""
    from fixedfirst.studies.serving.report import report_markdown as economics_markdown

    config = tmp_path / "economics.toml"
    config.write_text(ECONOMICS.format(directory=smoke_dir))
    out = tmp_path / "economics"
    command = ["serving-economics", str(config), "--out", str(out), "--quiet"]
    with pytest.raises(SystemExit) as e:
        main(command)
    assert e.value.code == 0
    numbers = json.loads((out / "report.json").read_text())
    runs = numbers["runs"]["smoke"]
    assert set(runs) == {f"{run}-seed{s}" for run in ARMS.values() for s in (0, 1)}
    assert numbers["missing"] == [str(smoke_dir / "runs" / f"{r}-seed2") for r in ARMS.values()]
    for name, run in runs.items():
        document = json.loads((out / "frontiers" / "smoke" / name / "frontier.json").read_text())
        points = document["points"]
        assert [p["serving"] for p in points][:4] == [f"fixed K={d}" for d in (1, 2, 3, 4)]
        assert len(points) == 6 and document["held_out"]["sequences"] == 8
        fixed = [p for p in points if p["rule"] is None]
        top = max(p["quality"] for p in fixed)
        best = min(p["max_depth"] for p in fixed if p["quality"] == top)
        least = min(p["mean_depth"] for p in points if p["quality"] >= top - 0.01)
        assert run["best_fixed_depth"] == best and run["arm"] == next(
            arm for arm, r in ARMS.items() if name.startswith(r + "-seed")
        )
        assert run["by"]["iterations"]["saved"] == pytest.approx(1 - least / best)
    assert (out / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert_report_remade(out, economics_markdown, economics_markdown(numbers), tmp_path)
    before = {p: p.read_bytes() for p in out.glob("frontiers/*/*/frontier.json")}
    assert len(before) == 6
    with pytest.raises(SystemExit) as e:
        main(command)
    assert e.value.code == 0
    assert before == {p: p.read_bytes() for p in out.glob("frontiers/*/*/frontier.json")}

    # --jobs 2: the same frontiers measured in two worker processes (their speeds aside)
    side_by_side = tmp_path / "economics-jobs"
    with pytest.raises(SystemExit) as e:
        main(
            ["serving-economics", str(config), "--out", str(side_by_side), "--quiet", "--jobs", "2"]
        )
    assert e.value.code == 0
    for path in before:
        one, two = (
            json.loads((root / path.relative_to(out)).read_text())["points"]
            for root in (out, side_by_side)
        )
        assert [(p["serving"], p["quality"], p["mean_depth"]) for p in one] == [
            (p["serving"], p["quality"], p["mean_depth"]) for p in two
        ], path

    def quality_only(summary):  # a run's summary without what its speeds give
        if isinstance(summary, dict):
            return {k: quality_only(v) for k, v in summary.items() if k != "speedup"}
        return summary

    again = json.loads((side_by_side / "report.json").read_text())["runs"]["smoke"]
    assert {n: quality_only(r) for n, r in again.items()} == {
        n: quality_only(r) for n, r in runs.items()
    }
