"""Run a sweep: train its runs, evaluate them at every serving depth, write the table and figures.

A sweep is a `Study` of the study flow (`studies.kit.conduct`): running it again
reuses finished runs and resumes interrupted ones; with `only` it is trained in pieces and
reports every finished run of DIR; side by side (`jobs`), workers train runs and measure each
finished one as soon as it finishes. The output directory is described in docs/reference/files.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fixedfirst.compute.run_cost import run_plan
from fixedfirst.evaluation.cached import HeldOut, cached_evaluation
from fixedfirst.evaluation.task import cached_task_evaluation
from fixedfirst.studies.kit.conduct import Conducted, Study, conduct
from fixedfirst.studies.kit.runs import PlannedRun, RunOutcome, finished_summary, run_directory
from fixedfirst.studies.kit.workers import Job, once_finished
from fixedfirst.studies.sweep.earlier import adopt_rows, read_earlier_rows
from fixedfirst.studies.sweep.report import sweep_results, write_report
from fixedfirst.studies.sweep.results import ROW_FROM, loss_curve, result_row
from fixedfirst.studies.sweep.spec import SweepSpec


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
        budget = run_plan(planned.config)
        status = _status(planned, out) if planned.name in chosen else "not selected"
        print(
            f"  {planned.name:<28s} {budget.total_steps:>6d} {budget.tokens:>11,} "
            f"{budget.flops:>13.3e}  {status}"
        )


class SweepProgress:
    """Before each run: how much of the sweep's modeled FLOPs is done and, from the rate of
    the runs trained so far in this invocation, roughly how long the rest takes."""

    def __init__(self, runs: list[PlannedRun], out: Path) -> None:
        self.flops = {r.name: run_plan(r.config).flops for r in runs}
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
        if not self.todo:
            return
        line = f"  sweep: {100 * self.done / self.total:.0f}% of modeled FLOPs done"
        if self.trained_flops > 0:
            rate = self.trained_flops / (time.monotonic() - self.started)
            left = (self.total - self.done) / rate
            line += f", about {left / 60:.0f} min left at {rate / 1e9:.1f} GFLOP/s"
        print(line, flush=True)


@dataclass(frozen=True)
class FinalEvaluation:
    """What a finished run of the sweep is measured on: `final_evaluation`'s arguments."""

    held_out: HeldOut
    depths: list[int]
    task: bool
    device: str


def final_evaluation(
    run: Path, plan: FinalEvaluation
) -> tuple[dict[str, Any], bool, dict[str, Any] | None, bool]:
    """A finished run's NLL at every serving depth and (task metric) its task score, each read
    back from its cache beside the run or measured now and cached: (nll, reused, task, reused)."""
    nll, nll_reused = cached_evaluation(run, plan.depths, plan.held_out, plan.device)
    if not plan.task:
        return nll, nll_reused, None, True
    task, task_reused = cached_task_evaluation(run, plan.depths, None, plan.device)
    return nll, nll_reused, task, task_reused


def say_evaluated(
    label: str, result: tuple[dict[str, Any], bool, dict[str, Any] | None, bool]
) -> None:
    nll, nll_reused, task, task_reused = result
    how = "saved" if nll_reused else f"{nll['scored_tokens']:,} tokens"
    print(f"eval {label}: mean NLL 1..16 {nll['mean_serving_nll']:.4f} ({how})", flush=True)
    asked = nll.get("rows") or nll["batches"] * nll["batch_size"]
    if nll.get("sequences", asked) < asked:
        print(
            f"  the validation split holds {nll['sequences']} sequences, fewer than the "
            f"{asked} asked for: all of them were scored",
            flush=True,
        )
    if task is not None:
        shown = ", ".join(f"K={d} {task['scores'][str(d)]:.3f}" for d in (1, 4, 16))
        print(f"  task: {shown} ({'saved' if task_reused else 'scored'})", flush=True)


def run_sweep(
    spec: SweepSpec,
    out: str | Path,
    only: list[str] | None = None,
    quiet: bool = False,
    device: str = "auto",
    jobs: int | None = None,
    rows_from: str | Path | None = None,
) -> Conducted:
    """Train the selected runs, then evaluate and report every finished run of the sweep.

    jobs: worker processes (None: one per free core on a CPU up to the runs left to train, one
    on a GPU; see `fixedfirst.studies.kit.workers`). rows_from: an earlier results.json of the
    sweep, whose rows stand in for runs not finished in DIR (`studies.sweep.earlier`)."""
    out = Path(out)
    selected = spec.select(only)
    earlier = None
    if rows_from is not None:
        earlier = (str(rows_from), read_earlier_rows(rows_from))
        adopt_rows(earlier[1], spec.runs, spec.settings, [], earlier[0])  # refused before training
    study = SweepStudy(spec, out, device, selected, SweepProgress(selected, out), earlier)
    return conduct(study, out, quiet, jobs, only=frozenset(p.name for p in selected))


def not_finished(spec: SweepSpec, results: dict[str, Any]) -> list[str]:
    """The sweep's runs that have no row in its results."""
    finished = {row["name"] for row in results["runs"]}
    return [p.name for p in spec.runs if p.name not in finished]


@dataclass
class SweepStudy(Study):
    """A sweep as a study: its runs, their final evaluations, its rows and report."""

    name = "sweep"
    evaluated = "final evaluations"
    collecting = None

    spec: SweepSpec
    out: Path
    device: str
    """Of the final evaluations."""
    selected: list[PlannedRun]
    """The runs to train now (--only)."""
    progress: SweepProgress
    earlier: tuple[str, list[dict[str, Any]]] | None = None
    """--rows-from: the file and its rows, for runs not finished in DIR."""

    def runs(self) -> list[PlannedRun]:
        return list(self.spec.runs)

    def announce(self) -> None:
        print_plan(self.spec, self.selected, self.out)

    def starting(self, index: int, planned: PlannedRun) -> None:
        self.progress(index, planned)

    def plan(self, planned: PlannedRun) -> FinalEvaluation:
        held_out = self.spec.settings.held_out(planned.config.train.seed)
        depths = sorted(self.spec.settings.eval_depths)
        return FinalEvaluation(held_out, depths, self.spec.metric == "task", self.device)

    def evaluations(self, planned: PlannedRun, run: Path) -> list[Job]:
        """A run's final evaluations, ready once it has finished."""

        def say(result: Any, seconds: float) -> None:
            say_evaluated(planned.name, result)

        plan = self.plan(planned)
        return [once_finished(f"{planned.name} eval", run, final_evaluation, plan, say=say)]

    def collect(self, outcomes: list[RunOutcome], quiet: bool) -> dict[str, Any]:
        """results.json's document: one row per finished run, its evaluations read back from
        their caches (or measured now)."""
        rows = []
        for i, outcome in enumerate(outcomes, 1):
            planned = self.spec.run(outcome.name)
            result = final_evaluation(outcome.path, self.plan(planned))
            if not quiet:
                say_evaluated(f"[{i}/{len(outcomes)}] {planned.name}", result)
            nll, _, task, _ = result
            flops_of, group = (
                self.spec.flops_of.get(planned.name),
                self.spec.groups.get(planned.name),
            )
            curve = loss_curve(outcome.path / "metrics.jsonl")
            blocks = self.spec.settings.blocks
            row = result_row(planned, outcome.summary, nll, flops_of, group, blocks, curve)
            if task is not None:
                row["task_score_name"] = task["score_name"]
                row["task_scores"] = task["scores"]
            rows.append(row)
        if self.earlier is not None:
            source, earlier_rows = self.earlier
            rows += adopt_rows(earlier_rows, self.spec.runs, self.spec.settings, rows, source)
            order = {p.name: i for i, p in enumerate(self.spec.runs)}
            rows.sort(key=lambda row: order[row["name"]])
            if not quiet:
                adopted = sum(ROW_FROM in row for row in rows)
                print(f"{adopted} run(s) not in {self.out} reported from {source}", flush=True)
        return sweep_results(self.spec, rows)

    def write(self, results: dict[str, Any], out: Path) -> list[Path]:
        return write_report(self.spec, out, results, not_finished(self.spec, results))
