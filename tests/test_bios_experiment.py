"""`fixedfirst bios --preset smoke` end to end: runs, recall, results, figure, report, reuse."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest

from fixedfirst.cli.main import main
from fixedfirst.compute.flops import flop_model
from fixedfirst.config import load_config
from fixedfirst.schedules import Schedule
from fixedfirst.studies.bios.experiment import load_preset, recall_job, snapshot_checkpoint
from fixedfirst.studies.bios.report import primary_findings, report_markdown
from fixedfirst.tasks.bios.recall import RecallReport
from tests.report_checks import assert_report_remade

PRINTED: dict[str, str] = {}
"""What the smoke experiment printed, for the test of its side-by-side lines."""


@pytest.fixture(scope="module")
def smoke_dir(tmp_path_factory):
    """The experiment as it runs on a CPU by default: its runs and their recall side by side in
    worker processes (two, of one thread each). It runs once; the test below holds one of its
    runs to the same run trained in this process."""
    out = tmp_path_factory.mktemp("bios") / "smoke"
    printed = io.StringIO()
    with (
        pytest.MonkeyPatch.context() as env,
        pytest.raises(SystemExit) as e,
        contextlib.redirect_stdout(printed),
    ):
        env.setenv("OMP_NUM_THREADS", "1")  # the cores to share: two workers of one thread
        main(["bios", "--preset", "smoke", "--out", str(out), "--jobs", "2"])
    assert e.value.code == 0
    PRINTED["smoke"] = printed.getvalue()
    return out


def recall_by_run(results: dict, fraction: float) -> dict[tuple[str, int], dict[int, float]]:
    """(schedule, seed) -> {depth: bits per person} at one budget fraction."""
    table: dict[tuple[str, int], dict[int, float]] = {}
    for r in results["recall"]:
        if r["budget_fraction"] == fraction:
            table.setdefault((r["schedule"], r["seed"]), {})[r["depth"]] = r["bits_per_person"]
    return table


def test_side_by_side_workers_compute_what_one_process_computes(smoke_dir, monkeypatch):
    """The workers trained the planned runs (each run's saved config is the plan's), and the
    recall of each checkpoint computed here, from the worker's run, equals what the workers
    reported, for the run that recalls most (equal recall is not two runs that recall nothing).
    That a worker trains bit for bit what this process trains is held for the same side-by-side
    runner by tests/test_sweep_seeds.py."""
    printed = PRINTED["smoke"]
    assert "6 runs and their recall side by side in 2 processes of 1 thread(s)" in printed
    assert printed.count("  recall ") == 18 and "reusing" not in printed
    results = json.loads((smoke_dir / "results.json").read_text())
    assert results["workers"] == {"processes": 2, "threads_each": 1}
    assert "side_by_side" in results["wall_clock_s"]
    preset = load_preset("smoke")
    planned = {p.name: p for p in preset.runs()}
    assert set(planned) == set(results["runs"])
    for name, plan in planned.items():
        assert load_config(smoke_dir / "runs" / name / "config.toml") == plan.config, name
    final = recall_by_run(results, 1.0)
    schedule, seed = max(final, key=lambda run: sum(final[run].values()))
    assert sum(final[(schedule, seed)].values()) > 0
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    worker = smoke_dir / "runs" / f"{schedule}-seed{seed}"
    for fraction in preset.experiment.fractions:
        recall = recall_job(worker, planned[worker.name].config, fraction, preset.experiment)
        assert recall.step == snapshot_checkpoint(worker, fraction).step
        reported = recall_by_run(results, fraction)[(schedule, seed)]
        assert RecallReport.from_dict(recall.report).bits() == reported, fraction


def test_results_schema_and_matched_flops(smoke_dir):
    results = json.loads((smoke_dir / "results.json").read_text())
    preset = load_preset("smoke")
    depths = preset.experiment.depths
    assert results["ceiling_bits"] > 0
    assert results["budget_fractions"] == [0.15, 0.45, 1.0]
    e = preset.experiment
    keys = {(r["schedule"], r["seed"], r["budget_fraction"], r["depth"]) for r in results["recall"]}
    assert keys == {
        (s, seed, f, d)
        for s in e.schedules
        for seed in e.seeds
        for f in (0.15, 0.45, 1.0)
        for d in depths
    }
    for r in results["recall"]:
        assert 0.0 <= r["bits_per_person"] <= results["ceiling_bits"] + 1e-9
    budget = results["flop_budget"]
    for name, run in results["runs"].items():
        # Compute-matched on the realised draws: below the budget by less than one step.
        config = preset.run_config(run["schedule"], run["seed"])
        deepest = max(Schedule(config.schedule, config.train.seed).depths(run["steps"] + 1))
        step_cost = config.train.tokens_per_step * flop_model(
            config.model, config.train.seq_len
        ).train(deepest)
        assert 0 <= budget - run["flops"] < step_cost, name
        assert {"steps", "tokens", "wall_s", "path"} <= set(run)
    # Cheaper schedules take more steps under the same FLOP budget.
    steps = {n: r["steps"] for n, r in results["runs"].items()}
    for seed in e.seeds:
        names = [f"{s}-seed{seed}" for s in ("fixed-4", "fixed-first-4-0.8", "uniform-1-16")]
        assert steps[names[0]] > steps[names[1]] > steps[names[2]]
    # Snapshots come in budget order: more FLOPs spent at a later fraction.
    for run in results["runs"].values():
        flops = sorted(
            {
                (r["budget_fraction"], r["flops"])
                for r in results["recall"]
                if (r["schedule"], r["seed"]) == (run["schedule"], run["seed"])
            }
        )
        assert [f for _, f in flops] == sorted(f for _, f in flops)
        assert flops[0][1] >= 0.15 * budget


def test_figure_and_report_are_written_from_the_numbers(smoke_dir):
    png = (smoke_dir / "figure1.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    report = (smoke_dir / "report.md").read_text()
    results = json.loads((smoke_dir / "results.json").read_text())
    # The preset's primary claims, each with its own interval, apart from the corrected rest.
    a = results["analysis"]
    assert [p["name"] for p in a["primary"]] == [
        p.name for p in load_preset("smoke").experiment.primary
    ]
    section = report[report.index("## Primary claims") : report.index("## What else")]
    assert [x for x in section.splitlines() if x.startswith("- ")] == [
        f"- {s}" for s in primary_findings(results)
    ]
    assert f"exploratory (Holm over {a['exploratory']['size']})" in report
    # The smoke's 3 pairs x 3 fractions x (the mean over depths, off depth, depths 4 and 64),
    # those zero in every seed left out of the family and counted apart.
    assert a["exploratory"]["size"] + a["exploratory"]["zero"] == 3 * 3 * 4
    # Every cell of the recall table is the seeds' mean and 95% interval, cut at 0 and the
    # ceiling, in its row and column.
    lines = report.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| arm | budget |"))
    columns = [c.strip() for c in lines[header].strip("|").split("|")]
    depths = [int(c[2:]) for c in columns if c.startswith("K=")]
    assert depths == results["depths"]
    rows = {}
    for line in lines[header + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[(cells[0], cells[1])] = cells[2:]
    labels = {
        "fixed-4": "fixed K=4",
        "uniform-1-16": "uniform 1..16",
        "fixed-first-4-0.8": "fixed-first K0=4, switch 0.8",
    }
    by_seed = {}
    for r in results["recall"]:
        key = (labels[r["schedule"]], f"{r['budget_fraction']:.0%}")
        by_seed.setdefault(key, {}).setdefault(r["depth"], []).append(r["bits_per_person"])
    assert set(rows) == set(by_seed)
    t = 12.706204736  # two-sided 95%, one degree of freedom: two seeds
    for key, cells in rows.items():
        for d, cell in zip(depths, cells, strict=True):
            values = by_seed[key][d]
            mean, half = np.mean(values), t * np.std(values, ddof=1) / np.sqrt(len(values))
            low, high = max(mean - half, 0.0), min(mean + half, results["ceiling_bits"])
            assert cell == f"{mean:.1f} [{low:.1f}, {high:.1f}]", (key, d)
    # The runs table: realised FLOPs and their share of the budget.
    for name, run in results["runs"].items():
        share = f"{100 * run['flops'] / results['flop_budget']:.2f}%"
        assert f"| {name} | {run['description']} | {run['steps']} |" in report
        assert share in report


def test_report_is_remade_from_report_json_alone(smoke_dir, tmp_path):
    """report.json holds the recall and the runs' costs, not the analysis: report.md is
    analysed and written again from it, and from results.json, to the byte."""
    results = json.loads((smoke_dir / "results.json").read_text())
    numbers = json.loads((smoke_dir / "report.json").read_text())
    assert "analysis" not in numbers and len(numbers["recall"]) == len(results["recall"])
    assert_report_remade(smoke_dir, report_markdown, report_markdown(results), tmp_path)


def test_second_invocation_reuses_everything(smoke_dir, capsys):
    before = {p: p.stat().st_mtime_ns for p in smoke_dir.glob("runs/*/checkpoints/*/*")}
    with pytest.raises(SystemExit) as e:
        main(["bios", "--preset", "smoke", "--out", str(smoke_dir)])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.count("reusing the finished run") == 6
    after = {p: p.stat().st_mtime_ns for p in smoke_dir.glob("runs/*/checkpoints/*/*")}
    assert before == after


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--preset", "huge"], "unknown preset"),
        (["--set", "experiment.flops=0"], "experiment.flops"),
        (["--set", "experiment.snapshots=[1.5]"], "experiment.snapshots"),
        (["--set", "experiment.nope=1"], "unknown key experiment.nope"),
        (["--set", "model.d_model=63"], "model.d_model"),
        (
            ["--set", "experiment.schedules=['fixed-4', 'uniform-1-16']"],
            "experiment.primary[0]: primary.arm: 'fixed-first-4-0.8' (Fixed-first at the",
        ),
        (
            ["--set", "experiment.depths=[1, 2, 16]"],
            "experiment.primary[2]: primary.quantity: kept_of_depth_4 (Fixed K = 4",
        ),
    ],
)
def test_bad_preset_input_is_one_line(tmp_path, capsys, args, fragment):
    with pytest.raises(SystemExit) as e:
        main(["bios", "--preset", "smoke", "--out", str(tmp_path / "x"), *args])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1


def test_unwritable_out_is_one_line(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(SystemExit) as e:
        main(["bios", "--preset", "smoke", "--out", str(blocker / "out")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "cannot write to --out" in err and err.count("\n") == 1
    assert blocker.read_text() == "not a directory"


def test_eval_task_bios_matches_the_experiment(smoke_dir, capsys):
    results = json.loads((smoke_dir / "results.json").read_text())
    final = recall_by_run(results, 1.0)
    schedule, seed = max(final, key=lambda run: final[run][1] + final[run][4])
    expected = final[(schedule, seed)]
    assert expected[1] + expected[4] > 0  # a comparison of something recalled
    run = smoke_dir / "runs" / f"{schedule}-seed{seed}"
    with pytest.raises(SystemExit) as e:
        main(["eval", str(run), "--task", "bios", "--depths", "1,4,64", "--limit", "12"])
    assert e.value.code == 0
    step = max(int(p.name.split("-")[1]) for p in (run / "checkpoints").glob("step-*"))
    saved = json.loads((run / f"eval-bios-step-{step:07d}.json").read_text())
    got = {r["depth"]: r["bits_per_person"] for r in saved["by_depth"]}
    assert {d: got[d] for d in (1, 4)} == {d: expected[d] for d in (1, 4)}
    assert "| 64 |" in capsys.readouterr().out


def test_the_loop_preset_runs_end_to_end_shrunk(tmp_path, monkeypatch):
    """`--preset loop` (the regime where recall runs through the loop) at a few seconds' size:
    its five arms train on the core alone (no prelude or coda), the WSD arm under its own
    learning-rate schedule, every run within one step below the budget, and the report carries
    the regime verdict and each fixed-first arm's learning rate at the switch."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "loop"
    shrink = [
        "experiment.flops=5e9",
        "experiment.seeds=[0]",
        "experiment.depths=[1, 4, 8]",
        "experiment.snapshots=[0.5]",
        "data.bios.people=12",
        "model.d_model=32",
        "train.batch_size=8",
        "train.compile=false",  # runs of a few steps: compiling would not pay
        # The preset's "fast" times bf16 against fp32 matmuls first, 10 s of CPU here that picks
        # fp32 (tests/test_precision_fast.py holds that choice).
        "train.precision=fp32",
    ]
    with pytest.raises(SystemExit) as e:
        main(
            ["bios", "--preset", "loop", "--out", str(out), "--quiet", "--jobs", "1"]
            + [a for s in shrink for a in ("--set", s)]
        )
    assert e.value.code == 0
    results = json.loads((out / "results.json").read_text())
    assert results["preset"] == "loop" and results["people"] == 12
    assert sorted(r["schedule"] for r in results["runs"].values()) == sorted(
        load_preset("loop").experiment.schedules
    )
    for name, run in results["runs"].items():
        config = load_config(out / "runs" / name / "config.toml")
        assert config.model.n_prelude == 0 and config.model.n_coda == 0
        deepest_step = flop_model(config.model, 52).train(16) * 8 * 52
        assert 5e9 - deepest_step < run["flops"] <= 5e9
    rates = results["analysis"]["learning_rate"]
    assert rates["fixed-first-4-0.8-wsd-seed0"]["lr_schedule"] == "wsd"
    assert rates["fixed-first-4-0.8-seed0"]["lr_schedule"] == "cosine"
    # Under WSD the switch (at 80%) is before the decay ends, so the rate there is higher.
    assert (
        rates["fixed-first-4-0.8-wsd-seed0"]["at_switch"]
        > rates["fixed-first-4-0.8-seed0"]["at_switch"]
    )
    assert "The regime (fixed K=4 at the full budget" in (out / "report.md").read_text()
