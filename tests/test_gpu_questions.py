"""benchmarks/gpu_questions.py on the CPU: `--smoke` runs every part (Figure 1 at scale, the
language model on pystdlib, the wall-clock savings) at toy size through the studies' own code,
each planned before it runs; its report is remade from its JSON alone, and its numbers are
checked against the study files it copied beside them. `--budget 0` skips every part. As on the
lent GPU machine, the script runs from the source tree (PYTHONPATH=src)."""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PARTS = ["environment", "figure 1", "language model", "savings", "total"]
SEEDS = {"figure 1": [400, 401, 402], "language model": [410, 411, 412]}


def gpu_questions(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": "src", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "benchmarks/gpu_questions.py", *args]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def benchmark_module(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """One smoke run with budget enough for everything (the toy sizes cap each part)."""
    tmp = tmp_path_factory.mktemp("gpu-questions")
    out = tmp / "out"
    done = gpu_questions("--smoke", "--budget", "3600", "--out", str(out), "--work", str(tmp / "w"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out, done.stdout, json.loads((out / "gpu-questions.json").read_text())


def test_every_part_runs_and_the_report_is_remade_from_the_json(smoke):
    out, stdout, data = smoke
    assert data["failed"] == []
    rows = data["rows"]
    assert list(dict.fromkeys(part for part, _, _ in rows)) == PARTS
    assert not [row for row in rows if row[1] in ("skipped", "FAILED")]
    markdown = benchmark_module("gpu_budget").markdown
    text = (out / "gpu-questions.md").read_text()
    assert text == markdown(data)
    assert all(f"| {p} | {c} | {r} |" in text for p, c, r in data["rows"])
    assert all(plan in text for plan in data["plans"].values()) and len(data["plans"]) == 3
    # Every row was printed as it was made, in the JSON's order.
    printed = [line for line in stdout.splitlines() if line.split(" | ")[0][2:] in PARTS]
    assert printed == [f"| {p} | {c} | {r} |" for p, c, r in rows]
    # Each part's plan, on the MFU its warm-up measured, was printed before its first run.
    for part, first_run in (
        ("figure 1", "| figure 1 | fixed-4-seed400 |"),
        ("language model", "| language model | uniform-seed410 |"),
        ("savings", "| savings | uniform 1..16, repeat 1 |"),
    ):
        plan = data["plans"][part]
        assert "from the warm-up measured here" in plan
        assert stdout.index(plan) < stdout.index(first_run)
        warm = [c for p, c, _ in rows if p == part and c.startswith("warm-up: depth")]
        assert [c.split(",")[0] for c in warm] == [f"warm-up: depth {d}" for d in (1, 4, 16)]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [
            "gpu-questions.json",
            "gpu-questions.md",
            "bios-report.json",
            "bios-report.md",
            "figure1.png",
            "lm-results.json",
            "lm-table.md",
            "lm-claims.md",
        ]
    )


def test_figure1_trains_every_arm_on_three_seeds_to_the_chosen_budget(smoke):
    out, _, data = smoke
    record = data["parts"]["figure 1"]
    bios = json.loads((out / "bios-report.json").read_text())
    assert bios["flop_budget"] == record["flops"]
    # K0 = 4 at 0.8 joins only when all four arms reach the target.
    assert ("fixed-first-4-0.8" in record["arms"]) == (record["scale_all_arms"] >= 1)
    assert record["arms"][:3] == ["fixed-4", "uniform-1-16", "fixed-first-2-0.67"]
    expected = {f"{a}-seed{s}" for a in record["arms"] for s in SEEDS["figure 1"]}
    assert set(bios["runs"]) == expected == set(record["runs"])
    for name, run in bios["runs"].items():
        assert run["flops"] <= record["flops"] and run["steps"] == record["runs"][name]["steps"]
    depths = sorted({r["depth"] for r in bios["recall"]})
    assert depths == [1, 2, 4, 8, 16]
    claims = [r for p, c, r in data["rows"] if p == "figure 1" and c == "primary claim"]
    assert [c.split(":")[0] for c in claims] == [
        "Fixed-first K0 = 2 at the ceiling from serving depth 2 to 64",
        "Uniform training has barely started",
        "Fixed K = 4 does not collapse off depth",
    ]
    assert any(c == "contrast with fixed K = 4" for p, c, _ in data["rows"] if p == "figure 1")


def test_the_language_model_says_whether_depth_beyond_4_gains_the_bar(smoke):
    out, _, data = smoke
    record = data["parts"]["language model"]
    results = json.loads((out / "lm-results.json").read_text())
    rows = {row["name"]: row for row in results["runs"]}
    assert set(rows) == set(record["runs"])
    assert sorted({row["seed"] for row in rows.values()}) == SEEDS["language model"]
    for seed in SEEDS["language model"]:
        uniform, k4, k2 = (
            rows[f"{n}-seed{seed}"]
            for n in ("uniform", "ff-k4-s0.67-uniform", "ff-k2-s0.67-uniform")
        )
        assert uniform["tokens"] == k4["tokens"] == k2["tokens"] == record["tokens"]
        for k in ("k4", "k2"):
            matched = rows[f"uniform-matched-ff-{k}-s0.67-seed{seed}"]
            target = rows[f"ff-{k}-s0.67-uniform-seed{seed}"]["modeled_flops"]
            assert matched["modeled_flops"] <= target and matched["tokens"] < uniform["tokens"]
        # The gain, from the depths the sweep scored: the best beyond 4 against depth 4.
        nll = uniform["nll_by_depth"]
        deeper = [v for k, v in nll.items() if int(k) > 4]
        assert set(map(int, nll)) >= set(range(1, 17)) | {24, 32}
        assert record["gains"][str(seed)] == pytest.approx(1 - min(deeper) / nll["4"])
    mean = statistics.fmean(record["gains"].values())
    assert record["reached"] == (mean >= 0.03)
    said = [r for p, c, r in data["rows"] if p == "language model" and "gains at least 3%" in c]
    assert said == [
        f"{'reached' if record['reached'] else 'not reached'}: " + said[0].split(": ", 1)[1]
    ]
    claims = [r for p, c, r in data["rows"] if p == "language model" and c == "claim"]
    assert len(claims) == len(results["claims"]) == 4


def test_the_savings_are_the_timed_runs_medians(smoke):
    _, _, data = smoke
    record = data["parts"]["savings"]
    runs = record["runs"]
    assert [(r["schedule"], r["repeat"]) for r in runs] == [
        (s, i)
        for i in range(record["repeats"])
        for s in ("uniform 1..16", "fixed-first K0=2 @0.67")
    ]

    def median(schedule: str, key: str) -> float:
        return statistics.median(r[key] for r in runs if r["schedule"] == schedule)

    for key, saved in (("wall_s", "measured"), ("whole_s", "measured_whole")):
        ratio = median("fixed-first K0=2 @0.67", key) / median("uniform 1..16", key)
        assert record[saved] == pytest.approx(1 - ratio)
    # K0 = 2 for two thirds of the steps, then uniform 1..16: the loop's share of the work at
    # mean depth 2 x 0.67 + 8.5 x 0.33 against 8.5, less the work outside the loop.
    loop_only = 1 - (2 * 0.67 + 8.5 * 0.33) / 8.5
    assert 0.2 < record["modeled"] < loop_only + 0.01
    # The language model's timed whole runs, against their own uniform run.
    lm = data["parts"]["language model"]["runs"]
    for name, saved in record["language_model"].items():
        seed = lm[name]["seed"]
        wall = lm[name]["wall_s"] / lm[f"uniform-seed{seed}"]["wall_s"]
        assert saved["measured"] == pytest.approx(1 - wall)


def test_a_budget_of_nothing_skips_every_part(tmp_path, capsys):
    """The script's main in this process (the smoke above runs it as the command it is): an
    interpreter's start, most of this test's CPU, saved."""
    benchmark_module("gpu_budget")  # the script imports it as its sibling
    questions = benchmark_module("gpu_questions")
    assert questions.main(["--smoke", "--budget", "0", "--out", str(tmp_path / "out")]) == 0
    assert "figure 1" in capsys.readouterr().out
    data = json.loads((tmp_path / "out" / "gpu-questions.json").read_text())
    skipped = [(p, r) for p, c, r in data["rows"] if c == "skipped"]
    assert skipped == [
        (p, "the budget is spent") for p in ("figure 1", "language model", "savings")
    ]
    assert "runs" not in data["parts"]["figure 1"] and data["plans"] == {}
