"""Run a sweep: train its runs, evaluate them at every serving depth, write the table and figures.

    DIR/runs/NAME/          each run (a normal run directory: `fixedfirst eval`/`train --resume`
                            work on it), with its evaluation in eval-step-NNNNNNN.json
    DIR/results.json        every finished run's numbers (see results.py), with seeds each
                            [[runs]] entry's over its seeds, and the claims' verdicts
    DIR/table.md            the schedule table (with seeds, and the seed table: seed_table.py)
    DIR/claims.md           each [[claims]] sentence with its interval and verdict (claims.py)
    DIR/nll_by_depth.png    NLL against serving depth, one line per run
    DIR/figure3.png         the Figure 3 run's loss around the switch

Training goes through `experiment.run_all`, so invoking the same sweep again reuses finished runs,
resumes interrupted ones and refuses a run directory trained with a different configuration.
Evaluations are cached per run the same way, so a second invocation costs seconds. With `only`,
just those runs train, but the report covers every run of the sweep that has finished in DIR: a
sweep can be run in pieces (or on several machines into copies of DIR) and reported at the end.

Side by side (`jobs`, `fixedfirst.studies.side_by_side`): on a CPU, by default one worker process
per free core up to the runs left to train, each training a run or measuring a finished run's final
evaluations, which start as soon as their run has finished. The single-process code then runs
over what the workers left on disk, reusing every run and cached evaluation, so the results are
those of one process at equal threads.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from fixedfirst.compute.plan import plan_run
from fixedfirst.errors import UserError
from fixedfirst.evaluation.cached import HeldOut, cached_evaluation
from fixedfirst.evaluation.nll import EVAL_DEPTHS
from fixedfirst.evaluation.task import cached_task_evaluation
from fixedfirst.files import locks
from fixedfirst.studies.side_by_side import (
    Job,
    plan_workers,
    run_finished,
    run_jobs,
    training_jobs,
)
from fixedfirst.studies.sweep.report import write_report
from fixedfirst.studies.sweep.results import loss_curve, result_row
from fixedfirst.studies.sweep.spec import SweepSpec
from fixedfirst.studies.training import (
    RUNS_DIR,
    PlannedRun,
    RunOutcome,
    check_runs_startable,
    finished_summary,
    run_all,
    run_directory,
)
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
        budget = plan_run(planned.config)
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
        self.flops = {r.name: plan_run(r.config).flops for r in runs}
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
    jobs: int | None = None,
) -> SweepOutcome:
    """Train the selected runs, then evaluate and report every finished run of the sweep.

    jobs: worker processes (None: one per free core on a CPU up to the runs left to train, one
    on a GPU; see `fixedfirst.studies.side_by_side`)."""
    out = Path(out)
    selected = spec.select(only)
    check_runs_startable(selected, out)
    to_train = [p for p in selected if _status(p, out) != "finished"]
    workers, threads = plan_workers(jobs, len(to_train), selected[0].config.train.device)
    check_out_dir(out)
    with locks.holding(out, "sweep"):  # one sweep at a time writes DIR
        return _sweep(spec, out, selected, quiet, device, workers, threads)


@dataclass(frozen=True)
class FinalEvaluation:
    """What a finished run of the sweep is measured on: `final_evaluation`'s arguments."""

    held_out: HeldOut
    task: bool
    device: str


def final_evaluation(
    run: Path, plan: FinalEvaluation
) -> tuple[dict[str, Any], bool, dict[str, Any] | None, bool]:
    """A finished run's NLL at every serving depth and (task metric) its task score, each read
    back from its cache beside the run or measured now and cached: (nll, reused, task, reused)."""
    nll, nll_reused = cached_evaluation(run, EVAL_DEPTHS, plan.held_out, plan.device)
    if not plan.task:
        return nll, nll_reused, None, True
    task, task_reused = cached_task_evaluation(run, EVAL_DEPTHS, None, plan.device)
    return nll, nll_reused, task, task_reused


def _evaluation_plan(spec: SweepSpec, planned: PlannedRun, device: str) -> FinalEvaluation:
    held_out = spec.settings.held_out(planned.config.train.seed)
    return FinalEvaluation(held_out, spec.metric == "task", device)


def _say_evaluated(
    quiet: bool, label: str, result: tuple[dict[str, Any], bool, dict[str, Any] | None, bool]
) -> None:
    nll, nll_reused, task, task_reused = result
    how = "saved" if nll_reused else f"{nll['scored_tokens']:,} tokens"
    _say(quiet, f"eval {label}: mean NLL 1..16 {nll['mean_serving_nll']:.4f} ({how})")
    asked = nll.get("rows") or nll["batches"] * nll["batch_size"]
    if nll.get("sequences", asked) < asked:
        _say(
            quiet,
            f"  the validation split holds {nll['sequences']} sequences, fewer than the "
            f"{asked} asked for: all of them were scored",
        )
    if task is not None:
        shown = ", ".join(f"K={d} {task['scores'][str(d)]:.3f}" for d in (1, 4, 16))
        _say(quiet, f"  task: {shown} ({'saved' if task_reused else 'scored'})")


def _sweep(
    spec: SweepSpec,
    out: Path,
    selected: list[PlannedRun],
    quiet: bool,
    device: str,
    workers: int,
    threads: int,
) -> SweepOutcome:
    if not quiet:
        print_plan(spec, selected, out)
    trained_side_by_side: list[str] = []
    if workers > 1:
        trained_side_by_side = _side_by_side(spec, out, selected, quiet, device, workers, threads)
    muted = quiet or workers > 1  # side by side, the workers have said what they did
    outcomes = run_all(selected, out, muted, on_start=SweepProgress(selected, out, muted))
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
        result = final_evaluation(path, _evaluation_plan(spec, planned, device))
        _say_evaluated(muted, f"[{i}/{len(finished)}] {planned.name}", result)
        nll, _, task, _ = result
        flops_of, group = spec.flops_of.get(planned.name), spec.groups.get(planned.name)
        curve = loss_curve(path / "metrics.jsonl")
        blocks = spec.settings.blocks
        row = result_row(planned, summaries[planned.name], nll, flops_of, group, blocks, curve)
        if task is not None:
            row["task_score_name"] = task["score_name"]
            row["task_scores"] = task["scores"]
        rows.append(row)
    missing = [p.name for p in spec.runs if p.name not in summaries]
    trained = [o.name for o in outcomes if not o.reused] + trained_side_by_side
    return SweepOutcome(
        rows=rows,
        trained=[p.name for p in selected if p.name in trained],
        reused=[p.name for p in selected if p.name not in trained],
        missing=missing,
        files=write_report(spec, out, rows, missing) if rows else [],
    )


def _side_by_side(
    spec: SweepSpec,
    out: Path,
    selected: list[PlannedRun],
    quiet: bool,
    device: str,
    workers: int,
    threads: int,
) -> list[str]:
    """Train the selected runs in `workers` processes and measure each finished run's final
    evaluations as soon as it has finished; returns the runs trained here. Everything lands
    where the single-process path reads it."""
    chosen = {p.name for p in selected}
    # Trainings first: a free worker takes the longest work before any evaluation.
    jobs = training_jobs([p for p in selected if _status(p, out) != "finished"], out)
    for planned in spec.runs:
        if planned.name not in chosen and _finished_elsewhere(planned, out, True) is None:
            continue  # neither trained now nor finished before: nothing to evaluate
        run = run_directory(out, planned.name)
        jobs.append(
            Job(
                f"{planned.name} eval",
                final_evaluation,
                (run.path, _evaluation_plan(spec, planned, device)),
                ready=partial(run_finished, run.path),
            )
        )
    trained: list[str] = []

    def on_done(job: Job, result: Any, seconds: float) -> None:
        if isinstance(result, RunOutcome):
            trained.append(result.name)
            _say(quiet, f"  {job.label}: {result.summary['steps']} steps in {seconds:.0f} s")
        else:
            _say_evaluated(quiet, job.label.removesuffix(" eval"), result)

    _say(
        quiet,
        f"{len(jobs)} jobs (trainings and final evaluations) side by side in {workers} "
        f"processes of {threads} thread(s) (--jobs)",
    )
    run_jobs(jobs, workers, threads, on_done, quiet)
    return trained


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
