"""Work in worker processes: a study's runs and their evaluations side by side.

A small model uses many threads poorly (docs/design.md §10), so workers of one thread each keep
every core busy, and an evaluation that waits for a checkpoint starts as soon as it is on disk.
The work is a list of `Job`s (a module-level function, its arguments, an optional readiness
check); whatever a job writes lands where the single-process path would, so a rerun reuses it.
Ctrl-C, a scheduler's SIGTERM or a failed job asks every worker to stop as a first Ctrl-C does
(§10).
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from fixedfirst.data.registry import KINDS, DataKind, register_kind
from fixedfirst.errors import UserError
from fixedfirst.runs.directory import RunDir
from fixedfirst.studies.kit.runs import PlannedRun, finished_summary, run_directory, run_one
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
