"""Run a list of training runs into one experiment directory, reusing what is already done.

Experiments (the bioS figure, the language-model schedule sweep) are lists of named runs. Each run
lives in `DIR/runs/NAME/`, a normal run directory, so any of them can be evaluated, resumed or
diagnosed on its own. Invoking an experiment again with the same DIR reuses finished runs,
resumes interrupted ones and starts missing ones; a run directory whose configuration differs
from what the experiment now asks for is refused rather than silently mixed into the results.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fixedfirst.config import RunConfig
from fixedfirst.errors import UserError
from fixedfirst.runs.directory import RunDir
from fixedfirst.train.interrupt import TrainingInterrupted

RUNS_DIR = "runs"
"""Each run of an experiment lives in DIR/runs/NAME/."""


@dataclass
class PlannedRun:
    name: str
    config: RunConfig


@dataclass
class RunOutcome:
    name: str
    path: Path
    summary: dict[str, Any]
    reused: bool


def run_directory(root: Path, name: str) -> RunDir:
    """The run directory of run `name` of the experiment in `root`."""
    return RunDir(Path(root) / RUNS_DIR / name)


def finished_summary(run: RunDir) -> dict[str, Any] | None:
    """The run's closing summary if it trained to the end of its budget, else None."""
    try:
        summary = json.loads(run.summary_path.read_text())
    except (OSError, ValueError):
        return None
    if summary.get("steps") != summary.get("total_steps"):
        return None
    return summary


def run_one(planned: PlannedRun, root: Path, quiet: bool = False) -> RunOutcome:
    from fixedfirst.train.trainer import Trainer

    run = run_directory(root, planned.name)
    resume = run.holds_run()
    if resume:
        run.refuse_other_run(planned.config)
        summary = finished_summary(run)
        if summary is not None:
            return RunOutcome(planned.name, run.path, summary, reused=True)
    trainer = Trainer(planned.config, str(run.path), resume=resume, quiet=quiet)
    return RunOutcome(planned.name, run.path, trainer.train(), reused=False)


def check_runs_startable(runs: list[PlannedRun], root: Path) -> None:
    """Everything that would stop an experiment part-way through, checked before anything is
    written: each run's budget (a schedule with dearer steps may not afford a single step where
    a cheaper one does), its data against its model (missing data, a vocabulary that does not
    fit, a task's options), and a run directory in `root` holding a different run."""
    from fixedfirst.compute.run_cost import run_plan
    from fixedfirst.data.registry import build_source

    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        raise UserError(f"run names must be unique, got {names}")
    for planned in runs:
        try:
            run_plan(planned.config)
            build_source(planned.config)
        except UserError as e:
            raise UserError(f'run "{planned.name}": {e}') from None
        run_directory(root, planned.name).refuse_other_run(planned.config)


def prepare_out_dir(out: Path) -> None:
    """Make the experiment directory, or say in one line why it cannot be written."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise UserError(f"cannot write to --out {out}: {e.strerror or e}") from None


def run_all(
    runs: list[PlannedRun],
    root: Path,
    quiet: bool = False,
    on_start: Callable[[int, PlannedRun], None] | None = None,
) -> list[RunOutcome]:
    """Run (or reuse) every run in order; `on_start(i, run)` is called before run i (1-based),
    e.g. to show the whole experiment's progress."""
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        raise UserError(f"run names must be unique, got {names}")
    outcomes = []
    for i, planned in enumerate(runs, 1):
        if not quiet:
            print(f"[{i}/{len(runs)}] {planned.name}", flush=True)
        if on_start is not None:
            on_start(i, planned)
        try:
            outcome = run_one(planned, root, quiet)
        except TrainingInterrupted as e:
            raise TrainingInterrupted(
                f"{e}, or run the same command again: it resumes interrupted runs", e.signum
            ) from None
        if not quiet and outcome.reused:
            print(f"  reusing the finished run in {outcome.path}", flush=True)
        outcomes.append(outcome)
    return outcomes
