"""The one study flow: a study's runs trained, evaluated and reported, in one or more processes.

Every study (bios, chains, the ablation, a sweep and the switch studies made of sweeps, the
looped mixture-of-experts and finishing studies, serving economics) is a `Study` handed to
`conduct`: check that every run can start, hold DIR's lock, train the runs and their
evaluations side by side in worker processes (`workers.py`), reuse what they did in this
process, collect the results, write results.json and the report. A study that trains nothing
(serving economics reads the runs of other studies) goes the same way with no runs.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from fixedfirst.files import locks
from fixedfirst.files.writing import write_json_atomic
from fixedfirst.runs.directory import run_defining_differences
from fixedfirst.studies.kit.runs import (
    PlannedRun,
    RunOutcome,
    check_runs_startable,
    finished_summary,
    prepare_out_dir,
    run_all,
    run_directory,
)
from fixedfirst.studies.kit.workers import Job, plan_workers, run_jobs, training_jobs
from fixedfirst.train.compilation import STUDY_CACHE, shared_cache


class Study(ABC):
    """What a study brings to the flow they all share (`conduct`): its runs, each run's
    evaluations, the results collected from what they did, and the report written from the
    results."""

    name: ClassVar[str]
    """Its command: one study at a time writes DIR (a lock of this name)."""
    evaluated: ClassVar[str]
    """What its evaluations are, as the side-by-side line names them ("recall")."""
    collecting: ClassVar[str | None]
    """The name of `collect`'s part of the wall-clock the results record with the processes
    used; None: the results record neither (a sweep's results.json is the same document
    whatever --jobs, each row with its run's own wall-clock)."""
    results_file: ClassVar[str | None] = "results.json"
    """Where in DIR `conduct` writes the results; None: the study's report.json is its whole
    results document (serving economics), so nothing is written beside it."""

    @abstractmethod
    def runs(self) -> list[PlannedRun]:
        """Every run the study reports, in its order (none: it reads the runs of others)."""

    @abstractmethod
    def evaluations(self, planned: PlannedRun, run: Path) -> list[Job]:
        """The evaluation jobs of a run (in directory `run`), each ready as soon as what it
        reads is on disk."""

    @abstractmethod
    def collect(self, outcomes: list[RunOutcome], quiet: bool) -> dict[str, Any]:
        """The results (results.json's document) from the reported runs' outcomes, their
        evaluations read back from their caches (or made now)."""

    @abstractmethod
    def write(self, results: dict[str, Any], out: Path) -> list[Path]:
        """Writes the figures and the report from the results into DIR; returns the files."""

    def announce(self) -> None:  # noqa: B027 (a hook most studies leave empty)
        """Prints the plan once DIR is held, unless quiet (a sweep's table of runs)."""

    def starting(self, index: int, planned: PlannedRun) -> None:  # noqa: B027 (likewise)
        """Called before each run this process trains, while it speaks (a sweep's progress)."""


@dataclass(frozen=True)
class Conducted:
    """What `conduct` did: the results, as written to results.json; the runs asked for that it
    trained now and those it found finished; every file it wrote, results.json first."""

    results: dict[str, Any]
    trained: list[str]
    reused: list[str]
    files: list[Path]


def conduct(
    study: Study, out: Path, quiet: bool, jobs: int | None, only: frozenset[str] | None = None
) -> Conducted:
    """Run a study into `out`: train the runs of `only` (None: all), report them and the other
    runs finished in DIR with the settings asked for (so a study can be trained in pieces,
    `sweep --only`).

    First everything that could stop it part-way, before DIR is written: every run to train can
    start (`check_runs_startable`) and the worker processes for the runs left to train fit
    (`plan_workers`; `jobs`: --jobs). Then, holding DIR's lock, with several workers the runs
    and their evaluations go side by side; then every run to train is trained or reused in this
    process (`run_all`, which reuses what the workers did), the runs finished in earlier
    invocations join them, and all are collected."""
    runs = study.runs()
    selected = [r for r in runs if only is None or r.name in only]
    if runs and not selected:
        raise ValueError(f"{study.name}: no run to train among {[r.name for r in runs]}")
    check_runs_startable(selected, out)
    to_train = [r for r in selected if finished_summary(run_directory(out, r.name)) is None]
    device = selected[0].config.train.device if selected else "cpu"
    workers, threads = plan_workers(jobs, len(to_train), device)
    prepare_out_dir(out)
    # One study at a time writes DIR; its runs share one cache of compiled graphs.
    with locks.holding(out, study.name), shared_cache(out / STUDY_CACHE):
        if not quiet:
            study.announce()
        chosen = {r.name for r in selected}
        earlier = finished_before([r for r in runs if r.name not in chosen], out, quiet)
        reported = [r for r in runs if r.name in chosen or r.name in earlier]
        wall_clock: dict[str, float] = {}
        trained: set[str] = set()
        if workers > 1:
            started = time.perf_counter()
            trained = _side_by_side(study, out, to_train, reported, (workers, threads), quiet)
            wall_clock["side_by_side"] = time.perf_counter() - started
        muted = quiet or workers > 1  # side by side, the workers have said what they did
        started = time.perf_counter()
        now = run_all(selected, out, muted, on_start=None if muted else study.starting)
        outcomes = _in_order(runs, now, earlier, trained)
        collected = time.perf_counter()
        results = study.collect(outcomes, muted)
        if study.collecting is not None:
            wall_clock["training_and_reuse"] = collected - started
            wall_clock[study.collecting] = time.perf_counter() - collected
            results["wall_clock_s"] = wall_clock
            # What each process used: the planned share side by side, the trainer's own choice
            # alone.
            alone = max(o.summary.get("threads", 0) for o in outcomes) or None
            each = threads if workers > 1 else alone
            results["workers"] = {"processes": workers, "threads_each": each}
        files = []
        if study.results_file is not None:
            write_json_atomic(out / study.results_file, results)
            files.append(out / study.results_file)
        files += study.write(results, out)
    new = {o.name for o in outcomes if not o.reused}
    return Conducted(
        results,
        trained=[r.name for r in selected if r.name in new],
        reused=[r.name for r in selected if r.name not in new],
        files=files,
    )


def finished_before(runs: list[PlannedRun], out: Path, quiet: bool) -> dict[str, RunOutcome]:
    """Of `runs` (not trained now), those finished in DIR with the settings asked for, each as
    a reused outcome; one trained with other settings is left out, and said so."""
    found = {}
    for planned in runs:
        run = run_directory(out, planned.name)
        if not run.config_path.is_file():
            continue
        summary = finished_summary(run)
        if summary is None:
            continue
        diff = run_defining_differences(run.saved_config(), planned.config)
        if diff:
            if not quiet:
                shown = ", ".join(diff)
                print(f"{run.path}: trained with other settings ({shown}); left out", flush=True)
            continue
        found[planned.name] = RunOutcome(planned.name, run.path, summary, reused=True)
    return found


def _in_order(
    runs: list[PlannedRun],
    now: list[RunOutcome],
    earlier: dict[str, RunOutcome],
    trained: set[str],
) -> list[RunOutcome]:
    """The outcomes of the runs reported, in the study's order; a run the workers trained in
    this invocation is not `reused`, though this process found it finished."""
    by_name = {**earlier, **{o.name: o for o in now}}
    return [
        replace(by_name[r.name], reused=False) if r.name in trained else by_name[r.name]
        for r in runs
        if r.name in by_name
    ]


def _side_by_side(
    study: Study,
    out: Path,
    to_train: list[PlannedRun],
    reported: list[PlannedRun],
    processes: tuple[int, int],
    quiet: bool,
) -> set[str]:
    """Train `to_train` and run the evaluations of the runs `reported` in `workers` processes
    of `threads` threads: trainings first, since a free worker should take the longest work
    before any evaluation. Returns the runs trained here."""
    workers, threads = processes
    evaluations = [
        job for r in reported for job in study.evaluations(r, run_directory(out, r.name).path)
    ]
    trained: set[str] = set()

    def on_done(job: Job, result: Any, seconds: float) -> None:
        if isinstance(result, RunOutcome):
            if not result.reused:
                trained.add(result.name)
            if not quiet:
                how = "reused" if result.reused else f"trained in {seconds:.0f} s"
                print(f"  {job.label}: {result.summary['steps']} steps, {how}", flush=True)
        elif not quiet and job.say is not None:
            job.say(result, seconds)

    if not quiet:
        print(
            f"{len(to_train)} runs and their {study.evaluated} side by side in {workers} "
            f"processes of {threads} thread(s) (--jobs)",
            flush=True,
        )
    run_jobs([*training_jobs(to_train, out), *evaluations], workers, threads, on_done, quiet)
    return trained
