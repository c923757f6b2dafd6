"""Jobs in worker processes: results by label, jobs that wait for others, errors, and workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fixedfirst.data.registry import KINDS, DataKind, data_kind
from fixedfirst.errors import UserError
from fixedfirst.studies.side_by_side import Job, plan_workers, run_jobs, run_progress


def write_after(path: str, text: str, needs: str | None = None) -> str:
    """A worker's job: append to a file (which must already hold `needs`), return the pid."""
    if needs is not None:
        assert needs in Path(path).read_text()
    with open(path, "a") as f:
        f.write(text + "\n")
    return f"{os.getpid()} {os.environ['OMP_NUM_THREADS']}"


def refuse(message: str) -> None:
    raise UserError(message)


def test_jobs_run_in_workers_and_wait_until_ready(tmp_path):
    log = tmp_path / "log"
    log.touch()
    jobs = [
        Job(
            "second",
            write_after,
            (str(log), "second", "first"),
            ready=lambda: "first" in log.read_text(),
        ),
        Job("first", write_after, (str(log), "first")),
        Job("third", write_after, (str(log), "third")),
    ]
    seen = []
    results = run_jobs(
        jobs, 2, 1, on_done=lambda job, result, s: seen.append(job.label), quiet=True
    )
    assert set(results) == {"first", "second", "third"}
    assert log.read_text().splitlines().index("first") < log.read_text().splitlines().index(
        "second"
    )
    assert seen.index("first") < seen.index("second")
    pids = {r.split()[0] for r in results.values()}
    assert str(os.getpid()) not in pids  # the work happened in worker processes
    assert {r.split()[1] for r in results.values()} == {"1"}  # each with the threads it was given


def no_source(config):
    raise AssertionError("never built")


PARENT_ONLY = DataKind(name="parent-only", summary="registered in the parent only", build=no_source)
"""A data kind whose module does not register it on import: a worker knows it only from its
parent."""


def kind_summary(name: str) -> str:
    return data_kind(name).summary


def test_workers_know_the_data_kinds_their_parent_registered(monkeypatch):
    monkeypatch.setitem(KINDS, PARENT_ONLY.name, PARENT_ONLY)
    results = run_jobs([Job("probe", kind_summary, (PARENT_ONLY.name,))], 1, 1, quiet=True)
    assert results == {"probe": PARENT_ONLY.summary}


def test_a_failing_job_stops_the_experiment_with_its_error(tmp_path):
    jobs = [
        Job("bad", refuse, ("no data at /nowhere",)),
        Job("ok", write_after, (str(tmp_path / "x"), "ok")),
    ]
    with pytest.raises(UserError, match="no data at /nowhere"):
        run_jobs(jobs, 2, 1, quiet=True)


def test_jobs_that_can_never_start_and_duplicate_labels_are_refused(tmp_path):
    never = Job("never", write_after, (str(tmp_path / "x"), "x"), ready=lambda: False)
    with pytest.raises(UserError, match="can never start: never"):
        run_jobs([never], 1, 1, quiet=True)
    same = Job("a", write_after, (str(tmp_path / "x"), "x"))
    with pytest.raises(ValueError, match="unique"):
        run_jobs([same, same], 1, 1, quiet=True)


def interrupted_before_training() -> tuple[bool, bool]:
    """A worker's job: Ctrl-C arrives before a run starts training (while it sets up), then
    again; the run's interrupt handler must start as asked to stop, as for one first Ctrl-C."""
    from fixedfirst.train.interrupt import Interrupt

    os.kill(os.getpid(), signal.SIGINT)
    os.kill(os.getpid(), signal.SIGUSR1)
    with Interrupt(announce=False) as interrupt:
        return interrupt.requested, signal.getsignal(signal.SIGINT) == interrupt._handle


def test_a_stop_before_training_reaches_the_run_and_spares_the_worker():
    (asked, handled), *_ = run_jobs(
        [Job("j", interrupted_before_training)], 1, 1, quiet=True
    ).values()
    assert asked and handled


def preempt_the_parent(path: str) -> None:
    """A worker's job: the parent process gets a scheduler's SIGTERM, twice; the job then waits,
    as a training run would, for the stop request to reach it, and writes whether it came."""
    from fixedfirst.train.interrupt import Interrupt

    with Interrupt(announce=False) as interrupt:
        os.kill(os.getppid(), signal.SIGTERM)
        os.kill(os.getppid(), signal.SIGTERM)
        deadline = time.monotonic() + 60
        while not interrupt.requested and time.monotonic() < deadline:
            time.sleep(0.05)
        Path(path).write_text(f"stop requested: {interrupt.requested}")


PREEMPTED = """
import sys
from fixedfirst.studies.side_by_side import Job, run_jobs
from fixedfirst.train.interrupt import TrainingInterrupted
from tests.test_side_by_side import preempt_the_parent
try:
    run_jobs([Job("j", preempt_the_parent, (sys.argv[1],))], 1, 1, quiet=True)
except TrainingInterrupted as stopped:
    sys.exit(stopped.exit_status)
"""


def test_a_scheduler_sigterm_to_the_parent_stops_the_workers_and_exits_for_requeue(tmp_path):
    # In a process of its own: without the parent's handler, SIGTERM would end the test session.
    root = Path(__file__).resolve().parent.parent
    said = tmp_path / "said"
    done = subprocess.run(
        [sys.executable, "-c", PREEMPTED, str(said)], cwd=root, timeout=120, capture_output=True
    )
    assert done.returncode == 75, done.stderr.decode()[-2000:]  # not killed (-15), not 130
    assert said.read_text() == "stop requested: True"  # the worker was asked, then waited for


def test_a_stop_request_is_a_first_ctrl_c_however_often_it_comes():
    from fixedfirst.train import interrupt as module

    with module.Interrupt(announce=False) as active:
        assert not active.requested
        module.request_stop()
        module.request_stop()
        assert active.requested  # asked to stop at the next step, not killed at once
    try:
        with module.Interrupt(announce=False) as later:
            assert later.requested  # a request made before training began is kept
    finally:
        module._stop_requested = None


def test_plan_workers_shares_the_cores(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert plan_workers(None, 3, "cpu") == (3, 1)  # one worker per run, up to the cores
    assert plan_workers(None, 8, "cpu") == (4, 1)
    assert plan_workers(None, 2, "cpu") == (2, 2)
    assert plan_workers(None, 0, "cpu") == (1, 4)  # nothing to train: one process, all cores
    assert plan_workers(1, 3, "cpu") == (1, 4)
    assert plan_workers(2, 3, "cpu") == (2, 2)
    assert plan_workers(8, 3, "cpu") == (3, 1)  # never more workers than jobs
    with pytest.raises(UserError, match="--jobs must be >= 1"):
        plan_workers(0, 3, "cpu")


def test_run_progress_reads_the_last_metrics_line(tmp_path):
    fraction = run_progress(tmp_path, budget=1e12)
    assert fraction() is None  # no metrics yet
    (tmp_path / "metrics.jsonl").write_text(
        '{"step": 1, "flops": 1e11}\n{"step": 2, "flops": 2.5e11}\n'
    )
    assert fraction() == pytest.approx(0.25)
    (tmp_path / "metrics.jsonl").write_text(
        '{"step": 1, "flops": 1e11}\n{"step": 2, "fl'
    )  # torn line
    assert fraction() is None
