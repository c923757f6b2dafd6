"""`fixedfirst sweep` end to end on a corpus the test prepares, its reuse, and its refusals."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from fixedfirst.cli.main import main
from fixedfirst.compute.plan import plan_run
from fixedfirst.studies.sweep import load_sweep
from fixedfirst.studies.sweep.results import TABLE_COLUMNS

ROOT = Path(__file__).resolve().parents[1]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
WORDS = ["the", "a", "cat", "dog", "sat", "on", "under", "mat", "red", "quick", "fox", "jumps"]


def run_cli(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err


def assert_one_line_error(code: int, err: str, command: str, *fragments: str) -> None:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"fixedfirst {command}: error:")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def files_with_mtimes(directory: Path) -> dict[str, int]:
    return {str(p.relative_to(directory)): p.stat().st_mtime_ns for p in directory.rglob("*")}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A small byte-level dataset made with `fixedfirst prepare` from generated sentences."""
    root = tmp_path_factory.mktemp("corpus")
    rng = random.Random(0)
    docs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30))) for _ in range(400)]
    text = root / "docs.txt"
    text.write_text("\n%\n".join(docs) + "\n%\n")
    data = root / "data"
    with pytest.raises(SystemExit) as info:
        main(
            ["prepare", str(text), "--separator", "%", "--val-fraction", "0.1", "--out", str(data)]
        )
    assert info.value.code == 0
    return data


BASE = """
[base.model]
vocab_size = 257
d_model = 32
n_heads = 4
n_prelude = 1
n_core = 1
n_coda = 1
max_seq_len = 16

[base.schedule]
kind = "fixed-first"
k0 = 2
switch = 0.5
k_max = 16

[base.train]
tokens = 640
batch_size = 4
seq_len = 16
lr = 3e-3
log_every = 1

[base.data]
kind = "tokens"
path = "{data}"

[base.eval]
depths = [1, 4, 16]
every = 4
batches = 1
"""

SETTINGS = """
[sweep]
reference = "uniform"
figure3 = "ff-k2"
eval_batches = 2
"""

RUNS = """
[[runs]]
name = "uniform"
schedule.kind = "uniform"

[[runs]]
name = "ff-k2"
schedule.k0 = 2
"""


def write_sweep(directory: Path, data: Path | str, text: str | None = None) -> Path:
    path = directory / "sweep.toml"
    path.write_text(text if text is not None else BASE.format(data=data) + SETTINGS + RUNS)
    return path


def test_two_run_sweep_end_to_end_then_reused(tmp_path, capsys, corpus, monkeypatch):
    sweep = write_sweep(tmp_path, corpus)
    out = tmp_path / "out"
    code, stdout, _ = run_cli(capsys, "sweep", sweep, "--out", out)
    assert code == 0
    assert "trained 2 run(s), reused 0; 2 in the table" in stdout
    assert "[1/2] uniform" in stdout and "[2/2] ff-k2" in stdout

    table = (out / "table.md").read_text().splitlines()
    assert table[0] == "| " + " | ".join(TABLE_COLUMNS) + " |"
    for column in ("modeled savings", "wall-clock savings", "mean NLL 1..16", "NLL K=64"):
        assert column in table[0]
    rows = [line for line in table[2:] if line.startswith("| ")]
    assert len(rows) == 2
    assert rows[0].startswith("| **uniform** (reference) | uniform 1..16 | 640 |")
    assert rows[1].startswith("| ff-k2 | fixed-first K0=2 switch 0.5 -> uniform 1..16 | 640 |")

    results = json.loads((out / "results.json").read_text())
    assert results["format"] == "fixedfirst-sweep-results"
    assert results["reference"] == "uniform"
    assert results["eval_depths"] == [*range(1, 17), 32, 64]
    uniform, ff = results["runs"]
    assert [uniform["name"], ff["name"]] == ["uniform", "ff-k2"]
    for row in (uniform, ff):
        assert row["steps"] == 10 and row["tokens"] == 640
        assert set(row["nll_by_depth"]) == {str(d) for d in results["eval_depths"]}
        mean = sum(row["nll_by_depth"][str(d)] for d in range(1, 17)) / 16
        assert row["mean_serving_nll"] == pytest.approx(mean)
        assert row["eval_tokens"] == 2 * 4 * 16
    spec = load_sweep(sweep)
    for row in (uniform, ff):
        plan = plan_run(spec.run(row["name"]).config)
        assert row["modeled_flops"] == pytest.approx(plan.flops, rel=1e-9)  # the drawn depths
        assert row["expected_flops"] == pytest.approx(plan.expected_flops, rel=1e-12)
    ratio = ff["expected_flops"] / uniform["expected_flops"]
    assert ff["modeled_savings"] == pytest.approx(1 - ratio)
    assert uniform["modeled_savings"] == pytest.approx(0.0, abs=1e-12)
    assert uniform["wall_savings"] == 0.0 and uniform["mean_nll_rel_diff"] == 0.0
    assert 0.2 < ff["modeled_savings"] < 0.5  # half the steps at K=2 instead of mean 8.5
    assert ff["mean_nll_rel_diff"] == pytest.approx(
        ff["mean_serving_nll"] / uniform["mean_serving_nll"] - 1
    )
    for figure in ("nll_by_depth.png", "figure3.png"):
        assert (out / figure).read_bytes()[:8] == PNG_MAGIC
    for name in ("uniform", "ff-k2"):
        assert (out / "runs" / name / "eval-step-0000010.json").is_file()
    assert any("switch" in p.read_text() for p in (out / "runs" / "ff-k2").rglob("meta.json"))

    # Again: nothing trains and nothing is evaluated; every file under runs/ is untouched.
    before = files_with_mtimes(out / "runs")

    def refuse(*args, **kwargs):
        raise AssertionError("a finished run was trained or evaluated again")

    monkeypatch.setattr("fixedfirst.train.trainer.Trainer.train", refuse)
    monkeypatch.setattr("fixedfirst.evaluation.cached.evaluate_run", refuse)
    code, stdout, _ = run_cli(capsys, "sweep", sweep, "--out", out)
    assert code == 0
    assert "trained 0 run(s), reused 2; 2 in the table" in stdout
    assert files_with_mtimes(out / "runs") == before
    assert (
        json.loads((out / "results.json").read_text())["runs"][1]["nll_by_depth"]
        == (ff["nll_by_depth"])
    )


def test_only_trains_the_named_runs_and_reports_what_finished(tmp_path, capsys, corpus):
    sweep = write_sweep(tmp_path, corpus)
    out = tmp_path / "out"
    code, stdout, _ = run_cli(capsys, "sweep", sweep, "--out", out, "--only", "ff-k2", "--quiet")
    assert code == 0 and stdout == ""
    assert not (out / "runs" / "uniform").exists()
    table = (out / "table.md").read_text()
    assert "| ff-k2 |" in table and "Not finished yet (left out): uniform." in table
    ff = json.loads((out / "results.json").read_text())["runs"][0]
    assert ff["wall_savings"] is None and ff["mean_nll_rel_diff"] is None  # no reference yet


def test_the_runs_of_a_sweep_keep_their_compiled_graphs_in_its_directory(
    tmp_path, capsys, corpus, monkeypatch
):
    """Every run the sweep trains sees DIR/compile-cache as inductor's cache directory (worker
    processes inherit it), and the setting ends with the sweep."""
    from fixedfirst.train.compilation import CACHE_ENV
    from fixedfirst.train.trainer import Trainer

    seen = []
    original = Trainer.train

    def train(self, *args, **kwargs):
        seen.append(os.environ.get(CACHE_ENV))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "train", train)
    monkeypatch.delenv(CACHE_ENV, raising=False)
    out = tmp_path / "out"
    sweep = write_sweep(tmp_path, corpus)
    code, _, err = run_cli(capsys, "sweep", sweep, "--out", out, "--jobs", 1, "--only", "ff-k2")
    assert code == 0, err
    assert seen == [str((out / "compile-cache").absolute())]
    assert CACHE_ENV not in os.environ


def test_compute_matched_run_gets_the_other_runs_modeled_flops(tmp_path, corpus):
    runs = RUNS + '\n[[runs]]\nname = "matched"\nschedule.kind = "uniform"\nflops_of = "ff-k2"\n'
    spec = load_sweep(write_sweep(tmp_path, corpus, BASE.format(data=corpus) + SETTINGS + runs))
    target = plan_run(spec.run("ff-k2").config)
    matched = spec.run("matched").config
    assert matched.train.flops == target.flops
    assert plan_run(matched).flops <= target.flops
    assert plan_run(matched).total_steps < target.total_steps  # uniform steps cost more
    assert spec.flops_of == {"matched": "ff-k2"}


def test_a_runs_nested_table_changes_only_the_options_it_names(tmp_path):
    """`data.bios.people = 300` in a [[runs]] entry (and in a factor level) sets one option of
    the base's [data.bios]; the base's other options stay, as with --set."""
    base = (ROOT / "configs/probes/bios-loop.toml").read_text()
    base = base[: base.index("[sweep]")].replace("people = 100", "people = 100\nfirst_names = 12")
    runs = """
[[runs]]
name = "p300"
data.bios.people = 300

[[runs]]
name = "p100"

[[gaps]]
name = "p300 vs p100"
a = "p300"
b = "p100"

[[factors]]
name = "pool"
title = "name pools"
base = "12"

[[factors.levels]]
name = "pool20"
data.bios.last_names = 20
"""
    path = tmp_path / "sweep.toml"
    path.write_text(base + runs)
    spec = load_sweep(path)
    options = {r.name: r.config.data.options for r in spec.runs}
    assert options["p300"] == {"people": 300, "first_names": 12}
    assert options["p100"] == {"people": 100, "first_names": 12}
    assert options["pool20-p300"] == {"people": 300, "first_names": 12, "last_names": 20}
    assert options["pool20-p100"] == {"people": 100, "first_names": 12, "last_names": 20}


def test_base_may_be_a_run_config_file(tmp_path, corpus):
    base = BASE.format(data=corpus).replace("[base.", "[")
    (tmp_path / "base.toml").write_text(base)
    spec = load_sweep(write_sweep(tmp_path, corpus, 'base = "base.toml"\n' + SETTINGS + RUNS))
    assert [r.name for r in spec.runs] == ["uniform", "ff-k2"]
    assert spec.run("uniform").config.schedule.kind == "uniform"
    assert spec.run("ff-k2").config.model.d_model == 32


BAD_SWEEPS = {
    "unknown top-level key": (BASE + SETTINGS + RUNS + "\nextra = 1\n", ["unknown key 'extra'"]),
    "unknown [sweep] key": (
        BASE + SETTINGS + "colour = 1\n" + RUNS,
        ["unknown key sweep.colour", "valid keys in [sweep]"],
    ),
    "unknown base key": (
        BASE.replace("d_model = 32", "d_modle = 32") + SETTINGS + RUNS,
        ["base", "unknown key model.d_modle"],
    ),
    "unknown run override key": (
        BASE + SETTINGS + RUNS + "schedule.kzero = 3\n",
        ['run "ff-k2"', "unknown key schedule.kzero"],
    ),
    "unknown run section": (
        BASE + SETTINGS + RUNS + "optimizer.lr = 3\n",
        ['run "ff-k2"', "unknown key 'optimizer'"],
    ),
    "bad run value": (
        BASE + SETTINGS + RUNS + "schedule.switch = 2.0\n",
        ['run "ff-k2"', "schedule.switch: must be in [0, 1]"],
    ),
    "duplicate run names": (
        BASE + SETTINGS + RUNS + '[[runs]]\nname = "uniform"\n',
        ["two runs are named 'uniform'"],
    ),
    "missing base": (SETTINGS + RUNS, ["no base configuration"]),
    "missing base file": ('base = "nowhere.toml"\n' + SETTINGS + RUNS, ["base:", "nowhere.toml"]),
    "no runs": (BASE + SETTINGS, ["no runs"]),
    "run without a name": (BASE + SETTINGS + "[[runs]]\nschedule.k0 = 1\n", ["has no name"]),
    "seeds repeated": (
        BASE + SETTINGS + "seeds = [0, 0]\n" + RUNS,
        ["sweep.seeds: distinct seeds >= 0, at least one"],
    ),
    "matched to an auto switch": (
        BASE + SETTINGS + RUNS + 'schedule.switch = "auto"\nswitch.window = 0.5\n'
        '[[runs]]\nname = "m"\nschedule.kind = "uniform"\nflops_of = "ff-k2"\n',
        ["run \"m\": flops_of = 'ff-k2' is an auto-switch run"],
    ),
    "task metric without a task": (
        BASE + SETTINGS + 'metric = "task"\n' + RUNS,
        ["trains on data.kind = 'tokens', which has no task metric"],
    ),
    "reference is not uniform": (
        BASE + SETTINGS.replace('"uniform"', '"ff-k2"') + RUNS,
        ["must train uniform 1..16"],
    ),
    "flops_of names no run": (
        BASE + SETTINGS + RUNS + 'flops_of = "nope"\n',
        ['run "ff-k2"', "flops_of = 'nope'"],
    ),
    "figure3 of a uniform run": (
        BASE + SETTINGS.replace('figure3 = "ff-k2"', 'figure3 = "uniform"') + RUNS,
        ["sweep.figure3", "fixed-first"],
    ),
    "TOML syntax error": (BASE + SETTINGS + RUNS + "[[runs]\n", ["TOML syntax error"]),
}


@pytest.mark.parametrize("case", list(BAD_SWEEPS))
def test_bad_sweep_files_are_one_line_errors_and_write_nothing(tmp_path, capsys, case):
    text, fragments = BAD_SWEEPS[case]
    sweep = write_sweep(tmp_path, "unused", text.replace("{data}", str(tmp_path / "data")))
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, "sweep", sweep, "--out", out)
    assert_one_line_error(code, err, "sweep", *fragments)
    assert not out.exists()


def test_missing_data_and_unknown_only_name_fail_before_anything_is_written(tmp_path, capsys):
    sweep = write_sweep(tmp_path, tmp_path / "no-data")
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, "sweep", sweep, "--out", out)
    assert_one_line_error(code, err, "sweep", 'run "uniform"', "no such data directory")
    code, _, err = run_cli(capsys, "sweep", sweep, "--out", out, "--only", "ff-k3")
    assert_one_line_error(code, err, "sweep", "--only", "'ff-k3'", "entries: uniform, ff-k2")
    assert not out.exists()


def test_changed_run_in_the_sweep_directory_is_refused(tmp_path, capsys, corpus):
    out = tmp_path / "out"
    sweep = write_sweep(tmp_path, corpus)
    assert run_cli(capsys, "sweep", sweep, "--out", out, "--only", "uniform", "--quiet")[0] == 0
    before = files_with_mtimes(out)
    changed = BASE.format(data=corpus).replace("lr = 3e-3", "lr = 3e-3\nseed = 5") + SETTINGS + RUNS
    sweep.write_text(changed)
    code, _, err = run_cli(capsys, "sweep", sweep, "--out", out)
    assert_one_line_error(code, err, "sweep", "different configuration (train.seed)")
    assert files_with_mtimes(out) == before
