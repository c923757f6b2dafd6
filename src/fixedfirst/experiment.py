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
from fixedfirst.train.run_dir import RunDir, run_defining_differences


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

    run = RunDir(root / "runs" / planned.name)
    resume = run.holds_run()
    if resume:
        diff = run_defining_differences(run.saved_config(), planned.config)
        if diff:
            raise UserError(
                f"{run.path} holds a run with a different configuration ({', '.join(diff)}); "
                "use another --out or delete that run directory"
            )
        summary = finished_summary(run)
        if summary is not None:
            return RunOutcome(planned.name, run.path, summary, reused=True)
    trainer = Trainer(planned.config, str(run.path), resume=resume, quiet=quiet)
    return RunOutcome(planned.name, run.path, trainer.train(), reused=False)


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
        outcome = run_one(planned, root, quiet)
        if not quiet and outcome.reused:
            print(f"  reusing the finished run in {outcome.path}", flush=True)
        outcomes.append(outcome)
    return outcomes
