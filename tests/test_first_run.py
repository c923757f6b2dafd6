"""benchmarks/first_run.py on the CPU: `--smoke` runs every section on a tiny model and passes
each check, its rows written as they are printed; `--budget` skips what does not fit; the old
command (benchmarks/gpu_check.py) still runs it. As on the lent GPU machine, the script runs
from the source tree (PYTHONPATH=src), not from an installed package."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = [
    "environment",
    "parity with the CPU",
    "host syncs",
    "trainer",
    "speed, eager",
    "memory",
    "speed, compiled",
    "total",
]


def first_run(*args: str, script: str = "first_run.py") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": "src", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(Path("benchmarks") / script), *args]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def test_the_smoke_run_passes_every_section_and_writes_what_it_prints(tmp_path):
    out = tmp_path / "first-run"
    done = first_run("--smoke", "--budget", "3600", "--out", str(out))  # nothing skipped
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads((out / "first-run.json").read_text())["rows"]
    assert list(dict.fromkeys(section for section, _, _ in rows)) == SECTIONS
    table = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert (out / "first-run.md").read_text().splitlines()[2:] == table
    results = {check: result for _, check, result in rows}
    assert results["one trainer step (batch path and train_step), eager"].startswith("0 by")
    graphs = "graphs compiled after the warm-up (the depths above, an evaluation at 1..16)"
    assert results[graphs] == "0"
    assert results["wall-clock"].endswith("of CPU); 0 check(s) failed")
    (kept,) = json.loads((out / "first-run.json").read_text())["warnings"]
    assert kept["check"] == "one trainer step (batch path and train_step), eager"
    assert kept["counted"] == [] and isinstance(kept["discounted"], list)
    speed = json.loads((out / "first-run.json").read_text())["speed"]["rows"]
    measured = [(r["mode"], r["depth"]) for r in speed]
    assert measured == [(m, d) for m in ("eager", "compiled") for d in (1, 2, 4, 8, 16)]


def test_a_budget_skips_the_sections_that_do_not_fit(tmp_path):
    done = first_run("--smoke", "--budget", "0", "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout + done.stderr
    skipped = [line for line in done.stdout.splitlines() if "| skipped | needs about" in line]
    assert [line.split(" | ")[0] for line in skipped] == [
        "| trainer",
        "| speed, eager",
        "| memory",
        "| speed, compiled",
    ]


def test_the_gpu_check_command_is_the_first_run():
    done = first_run("--help", script="gpu_check.py")
    assert done.returncode == 0, done.stderr
    assert "--steps" in done.stdout and "--no-compile" in done.stdout and "--budget" in done.stdout


def test_every_warning_of_the_sync_count_is_kept_with_its_text(tmp_path, monkeypatch):
    """A sync under CUDA's debug mode is counted, the mode's notice that it is a prototype is
    not, and first-run.json keeps both texts: a count is read again from what it counted."""
    spec = importlib.util.spec_from_file_location("first_run", ROOT / "benchmarks/first_run.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "first_run", module)  # its dataclasses look themselves up
    spec.loader.exec_module(module)
    sync = "called a synchronizing CUDA operation"
    notice = "Synchronization debug mode is a prototype feature; it may miss synchronizing calls"
    caught = [
        warnings.WarningMessage(UserWarning(notice), UserWarning, "x.py", 1),
        warnings.WarningMessage(UserWarning(sync), UserWarning, "y.py", 2),
    ]
    counted, discounted = module.sync_warnings(caught)
    assert counted == [f"UserWarning: {sync}"] and discounted == [f"UserWarning: {notice}"]
    report = module.Report(tmp_path, "benchmarks/first_run.py")
    report.keep_warnings("host syncs", "one step", counted, discounted)
    kept = json.loads((tmp_path / "first-run.json").read_text())["warnings"]
    assert kept == [
        {"section": "host syncs", "check": "one step", "counted": counted, "discounted": discounted}
    ]
