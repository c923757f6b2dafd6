"""Run a sweep: train its runs, evaluate them at every serving depth, write the table and figures.

    DIR/runs/NAME/          each run (a normal run directory: `fixedfirst eval`/`train --resume`
                            work on it), with its evaluation in eval-step-NNNNNNN.json
    DIR/results.json        every finished run's numbers (see results.py)
    DIR/table.md            the schedule table
    DIR/nll_by_depth.png    NLL against serving depth, one line per run
    DIR/figure3.png         the Figure 3 run's loss around the switch

Training goes through `experiment.run_all`, so invoking the same sweep again reuses finished runs,
resumes interrupted ones and refuses a run directory trained with a different configuration.
Evaluations are cached per run the same way, so a second invocation costs seconds. With `only`,
just those runs train, but the report covers every run of the sweep that has finished in DIR: a
sweep can be run in pieces (or on several machines into copies of DIR) and reported at the end.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fixedfirst import locks
from fixedfirst.compute import plan_budget
from fixedfirst.errors import UserError
from fixedfirst.experiments.sweep.depth_figure import plot_nll_by_depth
from fixedfirst.experiments.sweep.figure3 import plot_figure3
from fixedfirst.experiments.sweep.results import (
    compare_to_reference,
    result_row,
    results_document,
    table_markdown,
    write_results,
)
from fixedfirst.experiments.sweep.spec import SweepSpec
from fixedfirst.experiments.sweep.switch_report import write_study
from fixedfirst.runs.evaluation import cached_evaluation
from fixedfirst.runs.experiment import (
    RUNS_DIR,
    PlannedRun,
    check_runs_startable,
    finished_summary,
    run_all,
    run_directory,
)
from fixedfirst.runs.task_evaluation import cached_task_evaluation
from fixedfirst.train.evaluation import EVAL_DEPTHS
from fixedfirst.train.run_dir import run_defining_differences


@dataclass
class SweepOutcome:
    rows: list[dict[str, Any]]
    trained: list[str]
    reused: list[str]
    missing: list[str]
    files: list[Path] = field(default_factory=list)


def _say(quiet: bool, line: str) -> None:
    if not quiet:
        print(line, flush=True)


def check_out_dir(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a directory")
    try:
        (out / RUNS_DIR).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot write to {out}: {e.strerror or e}") from None


def _status(planned: PlannedRun, out: Path) -> str:
    run = run_directory(out, planned.name)
    if not run.holds_run():
        return "new"
    return "finished" if finished_summary(run) is not None else "resume"


def print_plan(spec: SweepSpec, selected: list[PlannedRun], out: Path) -> None:
    chosen = {p.name for p in selected}
    print(f"sweep {spec.path}: {len(spec.runs)} runs into {out}")
    print(f"  {'run':<28s} {'steps':>6s} {'tokens':>11s} {'modeled FLOPs':>13s}  status")
    for planned in spec.runs:
        budget = plan_budget(planned.config)
        status = _status(planned, out) if planned.name in chosen else "not selected"
        print(
            f"  {planned.name:<28s} {budget.total_steps:>6d} {budget.tokens:>11,} "
            f"{budget.flops:>13.3e}  {status}"
        )


class SweepProgress:
    """Before each run: how much of the sweep's modeled FLOPs is done and, from the rate of
    the runs trained so far in this invocation, roughly how long the rest takes."""

    def __init__(self, runs: list[PlannedRun], out: Path, quiet: bool) -> None:
        self.quiet = quiet
        self.flops = {r.name: plan_budget(r.config).flops for r in runs}
        self.todo = {r.name for r in runs if _status(r, out) != "finished"}
        self.total = sum(self.flops.values())
        self.done = sum(f for n, f in self.flops.items() if n not in self.todo)
        self.started = time.monotonic()
        self.trained_flops = 0.0
        self.previous: str | None = None

    def __call__(self, index: int, planned: PlannedRun) -> None:
        if self.previous in self.todo:
            self.done += self.flops[self.previous]
            self.trained_flops += self.flops[self.previous]
        self.previous = planned.name
        if self.quiet or not self.todo:
            return
        line = f"  sweep: {100 * self.done / self.total:.0f}% of modeled FLOPs done"
        if self.trained_flops > 0:
            rate = self.trained_flops / (time.monotonic() - self.started)
            left = (self.total - self.done) / rate
            line += f", about {left / 60:.0f} min left at {rate / 1e9:.1f} GFLOP/s"
        print(line, flush=True)


def run_sweep(
    spec: SweepSpec,
    out: str | Path,
    only: list[str] | None = None,
    quiet: bool = False,
    device: str = "auto",
) -> SweepOutcome:
    """Train the selected runs, then evaluate and report every finished run of the sweep."""
    out = Path(out)
    selected = spec.select(only)
    check_runs_startable(selected, out)
    check_out_dir(out)
    with locks.holding(out, "sweep"):  # one sweep at a time writes DIR
        return _sweep(spec, out, selected, quiet, device)


def _sweep(
    spec: SweepSpec, out: Path, selected: list[PlannedRun], quiet: bool, device: str
) -> SweepOutcome:
    if not quiet:
        print_plan(spec, selected, out)
    outcomes = run_all(selected, out, quiet, on_start=SweepProgress(selected, out, quiet))
    summaries = {o.name: o.summary for o in outcomes}
    for planned in spec.runs:  # finished runs from earlier invocations (e.g. with --only)
        if planned.name not in summaries:
            summary = _finished_elsewhere(planned, out, quiet)
            if summary is not None:
                summaries[planned.name] = summary

    rows = []
    finished = [p for p in spec.runs if p.name in summaries]
    for i, planned in enumerate(finished, 1):
        path = run_directory(out, planned.name).path
        evaluation, cached = cached_evaluation(path, EVAL_DEPTHS, spec.eval_batches, device)
        mean = evaluation["mean_serving_nll"]
        how = "saved" if cached else f"{evaluation['scored_tokens']:,} tokens"
        _say(quiet, f"eval [{i}/{len(finished)}] {planned.name}: mean NLL 1..16 {mean:.4f} ({how})")
        flops_of, group = spec.flops_of.get(planned.name), spec.groups.get(planned.name)
        row = result_row(planned, summaries[planned.name], evaluation, flops_of, group)
        if spec.metric == "task":
            task, cached = cached_task_evaluation(path, EVAL_DEPTHS, None, device)
            row["task_score_name"] = task["score_name"]
            row["task_scores"] = task["scores"]
            shown = ", ".join(f"K={d} {task['scores'][str(d)]:.3f}" for d in (1, 4, 16))
            _say(quiet, f"  task: {shown} ({'saved' if cached else 'scored'})")
        rows.append(row)
    missing = [p.name for p in spec.runs if p.name not in summaries]
    return SweepOutcome(
        rows=rows,
        trained=[o.name for o in outcomes if not o.reused],
        reused=[o.name for o in outcomes if o.reused],
        missing=missing,
        files=write_report(spec, out, rows, missing) if rows else [],
    )


def _finished_elsewhere(planned: PlannedRun, out: Path, quiet: bool) -> dict[str, Any] | None:
    run = run_directory(out, planned.name)
    if not run.config_path.is_file():
        return None
    summary = finished_summary(run)
    if summary is None:
        return None
    diff = run_defining_differences(run.saved_config(), planned.config)
    if diff:
        _say(quiet, f"{run.path}: trained with other settings ({', '.join(diff)}); left out")
        return None
    return summary


def write_report(
    spec: SweepSpec, out: Path, rows: list[dict[str, Any]], missing: list[str]
) -> list[Path]:
    """results.json, table.md, nll_by_depth.png, (when its run finished) figure3.png and, for a
    switch study, switch_study.md/.json/.png."""
    compare_to_reference(rows, spec.reference)
    document = results_document(rows, spec.reference, spec.path, EVAL_DEPTHS)
    write_results(out, document, table_markdown(rows, spec.reference, missing))
    files = [out / "results.json", out / "table.md"]
    files.append(plot_nll_by_depth(rows, spec.reference, out / "nll_by_depth.png"))
    if spec.figure3 is not None and any(r["name"] == spec.figure3 for r in rows):
        figure3_run = run_directory(out, spec.figure3).path
        files.append(plot_figure3(figure3_run, out / "figure3.png"))
    if spec.switch_study:
        name = rows[0].get("task_score_name") if spec.metric == "task" else None
        files += write_study(rows, spec.metric, name or "mean serving NLL", out)
    return files
