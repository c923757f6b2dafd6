"""The one study runner: a study's runs trained, evaluated and reported, in one or more processes.

Every study (bios, chains, the ablation, a sweep and the switch studies made of sweeps) is a
`Study` handed to `conduct`: check that every run can start, hold DIR's lock, train the runs
and their evaluations side by side in worker processes, reuse what they did in this process,
collect the results, write results.json and the report. A small model uses many threads poorly
(docs/design.md §10), so workers of one thread each keep every core busy, and an evaluation that
waits for a checkpoint starts as soon as it is on disk. The work is a list of `Job`s (a
module-level function, its arguments, an optional readiness check); whatever a job writes lands
where the single-process path would, so a rerun reuses it. Ctrl-C, a scheduler's SIGTERM or a
failed job asks every worker to stop as a first Ctrl-C does (§10).
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from fixedfirst.data.registry import KINDS, DataKind, register_kind
from fixedfirst.errors import UserError
from fixedfirst.files import locks
from fixedfirst.files.writing import write_json_atomic
from fixedfirst.runs.directory import RunDir, run_defining_differences
from fixedfirst.studies.training import (
    PlannedRun,
    RunOutcome,
    check_runs_startable,
    finished_summary,
    prepare_out_dir,
    run_all,
    run_directory,
    run_one,
)
from fixedfirst.train.compilation import STUDY_CACHE, shared_cache
from fixedfirst.train.interrupt import STOP_SIGNALS, TrainingInterrupted, scheduler_signals

STOP_SIGNAL = getattr(signal, "SIGUSR1", signal.SIGINT)
"""The parent's stop request to its workers (POSIX; where there is no SIGUSR1, SIGINT)."""

STATUS_EVERY = 30.0
"""Seconds between status lines while jobs run."""


@dataclass
class Job:
    """One piece of an experiment's work for a worker process."""

    label: str
    call: Callable[..., Any]
    args: tuple[Any, ...] = ()
    ready: Callable[[], bool] | None = None
    """Checked in the parent before the job is handed out; None: ready at once."""
    progress: Callable[[], float | None] | None = None
    """Fraction done, read in the parent for the status line (a run's metrics file)."""
    say: Callable[[Any, float], None] | None = None
    """Prints the job's result (result, seconds) in the parent, unless quiet."""


def once_finished(
    label: str,
    run: Path,
    call: Callable[..., Any],
    *args: Any,
    say: Callable[[Any, float], None] | None = None,
) -> Job:
    """A job on the run in `run`, `call(run, *args)`, ready once the run has trained to the end
    of its budget."""
    return Job(label, call, (run, *args), ready=partial(run_finished, run), say=say)


def plan_workers(requested: int | None, jobs: int, device: str) -> tuple[int, int]:
    """(workers, threads per worker) for `jobs` jobs that each could use the whole machine.

    requested: --jobs (None: automatic). Automatic is one worker on a GPU (the runs would share
    one device) and otherwise one worker per free core up to the number of jobs, the cores
    shared out evenly (OMP_NUM_THREADS, when set, is the number of cores to use)."""
    from fixedfirst.machine.device import choose_threads

    cores, _ = choose_threads(None)
    if requested is not None:
        if requested < 1:
            raise UserError(f"--jobs must be >= 1, got {requested}")
        workers = min(requested, max(1, jobs))
    elif device in ("cuda", "auto") and _cuda_available():
        workers = 1
    else:
        workers = max(1, min(cores, jobs))
    return workers, max(1, cores // workers)


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _start_worker(threads: int, kinds: list[DataKind], started: Any, stopping: Any) -> None:
    from fixedfirst.train.interrupt import request_stop

    # A spawned worker imports only what it unpickles: it knows the parent's data kinds once
    # they are registered here (unpickling them imports the modules that define them).
    for kind in kinds:
        register_kind(kind)

    # Ctrl-C reaches every process of the terminal's group: a worker must not die of it with a
    # traceback, nor lose it while a run sets up; a training run's own handler takes over while
    # it trains (a second Ctrl-C there stops at once, as in one process).
    # A scheduler's SIGTERM may reach every process of the job: the same stop request.
    for signum in STOP_SIGNALS:
        signal.signal(signum, request_stop)
    started.put(os.getpid())  # from now on the parent's stop signal is a stop request
    if stopping.is_set():  # the parent stopped before it could know this worker
        request_stop()
    os.environ["OMP_NUM_THREADS"] = str(threads)  # what a run's `train.threads` then picks
    import torch

    torch.set_num_threads(threads)


class WorkerPool:
    """Spawned worker processes of `threads` threads that report their process ids as they
    start (the executor keeps its own list private), so that a stop reaches every one."""

    def __init__(self, workers: int, threads: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.started = context.SimpleQueue()
        self.stopping = context.Event()
        self.executor = ProcessPoolExecutor(
            workers,
            context,
            initializer=_start_worker,
            initargs=(threads, list(KINDS.values()), self.started, self.stopping),
        )

    def stop(self) -> None:
        """Ask every worker to stop as a first Ctrl-C would: those started by SIGUSR1 (never
        taken for a second), one still starting when it has its handlers (`stopping`)."""
        self.stopping.set()
        while not self.started.empty():
            with contextlib.suppress(OSError):
                os.kill(self.started.get(), STOP_SIGNAL)


def _already_stopping(signum: int, frame: Any) -> None:
    """A repeated SIGTERM or SIGUSR1 while the workers checkpoint: nothing more to do."""


def _stop_on_signal(signum: int, frame: Any) -> None:
    """The parent's SIGTERM or SIGUSR1 (a scheduler preempting the job): stop as Ctrl-C does,
    the workers checkpointing first, and exit with the requeue status. Only the first counts, so
    that more of them cannot cut the checkpoints short (handlers run in the main thread)."""
    for other in STOP_SIGNALS:
        if other != signal.SIGINT:
            signal.signal(other, _already_stopping)
    raise TrainingInterrupted("", signum)


def run_jobs(
    jobs: list[Job],
    workers: int,
    threads: int,
    on_done: Callable[[Job, Any, float], None] | None = None,
    quiet: bool = False,
) -> dict[str, Any]:
    """Run every job in `workers` processes of `threads` threads; label -> result.

    on_done(job, result, seconds) is called in the parent as each job finishes."""
    labels = [j.label for j in jobs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"job labels must be unique, got {labels}")
    waiting = list(jobs)
    running: dict[Future, tuple[Job, float]] = {}
    results: dict[str, Any] = {}
    started = last_status = time.monotonic()
    pool = WorkerPool(workers, threads)
    with scheduler_signals(_stop_on_signal):
        try:
            while waiting or running:
                for job in list(waiting):  # readiness read from disk only while a worker is free
                    if len(running) == workers:
                        break
                    if job.ready is None or job.ready():
                        waiting.remove(job)
                        running[pool.executor.submit(job.call, *job.args)] = (job, time.monotonic())
                if not running:  # every waiting job was checked, and nothing can make one ready
                    names = ", ".join(j.label for j in waiting)
                    raise UserError(f"nothing is running and these can never start: {names}")
                done, _ = wait(running, timeout=1.0, return_when=FIRST_COMPLETED)
                for future in [f for f in running if f in done]:  # in the order submitted
                    job, t0 = running.pop(future)
                    results[job.label] = future.result()
                    if on_done is not None:
                        on_done(job, results[job.label], time.monotonic() - t0)
                now = time.monotonic()
                if not quiet and now - last_status >= STATUS_EVERY:
                    last_status = now
                    print(
                        _status([j for j, _ in running.values()], waiting, now - started),
                        flush=True,
                    )
        except KeyboardInterrupt as stop:  # Ctrl-C, or (TrainingInterrupted) a scheduler's signal
            pool.stop()
            pool.executor.shutdown(wait=True, cancel_futures=True)
            raise TrainingInterrupted(
                "stopped (runs in training saved a checkpoint); run the same command again: it "
                "resumes them and reuses what is done",
                getattr(stop, "signum", signal.SIGINT),
            ) from None
        except BrokenProcessPool:
            pool.executor.shutdown(wait=False, cancel_futures=True)
            raise UserError(
                "a worker process died (out of memory, or killed); run the same command again: "
                "it resumes the runs and reuses what is done, or use --jobs 1"
            ) from None
        except BaseException:
            # A job failed: the other runs checkpoint and stop, so that the error is seen now.
            pool.stop()
            pool.executor.shutdown(wait=True, cancel_futures=True)
            raise
        pool.executor.shutdown(wait=True)
        return results


def _status(running: list[Job], waiting: list[Job], elapsed: float) -> str:
    parts = []
    for job in running:
        fraction = job.progress() if job.progress is not None else None
        parts.append(job.label if fraction is None else f"{job.label} {fraction:.0%}")
    minutes, seconds = divmod(int(elapsed), 60)
    return (
        f"  {minutes}:{seconds:02d} running: {', '.join(parts)}; {len(waiting)} waiting"
        if parts
        else f"  {minutes}:{seconds:02d} {len(waiting)} waiting"
    )


def run_progress(run: Path, budget: float) -> Callable[[], float | None]:
    """The fraction of `budget` FLOPs a run has trained, from its metrics file's last line."""

    def fraction() -> float | None:
        try:
            with open(Path(run) / "metrics.jsonl", "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 4096))
                last = f.read().splitlines()[-1]
            return min(1.0, json.loads(last)["flops"] / budget)
        except (OSError, IndexError, ValueError, KeyError, TypeError):
            return None

    return fraction


def training_jobs(runs: list[PlannedRun], root: Path) -> list[Job]:
    """One job per run: train (or reuse) it into root/runs/NAME (`training.run_one`), its
    progress read from its metrics file as a fraction of the run's planned FLOPs."""
    from fixedfirst.compute.run_cost import run_plan

    jobs = []
    for planned in runs:
        path = run_directory(root, planned.name).path
        progress = run_progress(path, run_plan(planned.config).flops)
        jobs.append(Job(planned.name, run_one, (planned, root, True), progress=progress))
    return jobs


def run_finished(run: Path) -> bool:
    """The run in `run` has trained to the end of its budget (a follow-up job's readiness)."""
    return finished_summary(RunDir(run)) is not None


class Study(ABC):
    """What a study (bios, chains, the ablation, a sweep) brings to the flow they all share
    (`conduct`): its runs, each run's evaluations, the results collected from what they did,
    and the report written from the results."""

    name: ClassVar[str]
    """Its command: one study at a time writes DIR (a lock of this name)."""
    evaluated: ClassVar[str]
    """What its evaluations are, as the side-by-side line names them ("recall")."""
    collecting: ClassVar[str | None]
    """The name of `collect`'s part of the wall-clock the results record with the processes
    used; None: the results record neither (a sweep's results.json is the same document
    whatever --jobs, each row with its run's own wall-clock)."""

    @abstractmethod
    def runs(self) -> list[PlannedRun]:
        """Every run the study reports, in its order."""

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
    if not selected:
        raise ValueError(f"{study.name}: no run to train among {[r.name for r in runs]}")
    check_runs_startable(selected, out)
    to_train = [r for r in selected if finished_summary(run_directory(out, r.name)) is None]
    workers, threads = plan_workers(jobs, len(to_train), selected[0].config.train.device)
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
        write_json_atomic(out / "results.json", results)
        files = [out / "results.json", *study.write(results, out)]
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
