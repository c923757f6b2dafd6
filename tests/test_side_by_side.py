"""The study runner: jobs in worker processes (results by label, jobs that wait for others,
errors, stops, workers), and `conduct`, the flow every study shares (resume, reuse, a subset
trained with the rest reported, the directory's lock, a stop that leaves resumable runs)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fixedfirst.data.registry import KINDS, DataKind, data_kind
from fixedfirst.errors import UserError
from fixedfirst.files.writing import write_json_atomic
from fixedfirst.runs.directory import RunDir
from fixedfirst.studies.kit.conduct import Study, conduct
from fixedfirst.studies.kit.runs import PlannedRun, RunOutcome
from fixedfirst.studies.kit.workers import (
    Job,
    WorkerPool,
    once_finished,
    plan_workers,
    run_jobs,
    run_progress,
)
from fixedfirst.train.trainer import Trainer
from tests.bad_input_edges import HOLDER
from tests.trainer_helpers import tiny_config, train_records


def write_after(path: str, text: str, needs: str | None = None) -> str:
    """A worker's job: append to a file (which must already hold `needs`), return the pid."""
    if needs is not None:
        assert needs in Path(path).read_text()
    with open(path, "a") as f:
        f.write(text + "\n")
    return f"{os.getpid()} {os.environ['OMP_NUM_THREADS']}"


def refuse(message: str) -> None:
    raise UserError(message)


def test_jobs_run_in_workers_and_wait_until_ready(tmp_path, monkeypatch):
    """Jobs run in two worker processes of the threads they were given, one only once what it
    waits for is done, and the workers know the data kinds their parent registered (one pool
    for all: each worker costs seconds of CPU to start)."""
    monkeypatch.setitem(KINDS, PARENT_ONLY.name, PARENT_ONLY)
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
        Job("probe", kind_summary, (PARENT_ONLY.name,)),
    ]
    seen = []
    results = run_jobs(
        jobs, 2, 1, on_done=lambda job, result, s: seen.append(job.label), quiet=True
    )
    assert results.pop("probe") == PARENT_ONLY.summary
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
from fixedfirst.studies.kit.workers import Job, run_jobs
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


def stop_was_asked(wait: float) -> bool:
    """A worker's job: whether a stop request reaches it within `wait` seconds."""
    from fixedfirst.train.interrupt import Interrupt

    with Interrupt(announce=False) as interrupt:
        deadline = time.monotonic() + wait
        while not interrupt.requested and time.monotonic() < deadline:
            time.sleep(0.05)
        return interrupt.requested


def test_a_stop_reaches_a_started_worker_and_one_that_starts_after_it():
    """Without the executor's private list of processes: a started worker is known by the id
    it reported, and one started after the stop takes the request as it starts."""
    started = WorkerPool(1, 1)
    late = WorkerPool(1, 1)
    try:
        assert started.executor.submit(stop_was_asked, 0.0).result(timeout=120) is False
        started.stop()
        assert started.executor.submit(stop_was_asked, 60.0).result(timeout=120) is True
        late.stop()  # before its worker exists
        assert late.executor.submit(stop_was_asked, 0.0).result(timeout=120) is True
    finally:
        started.executor.shutdown()
        late.executor.shutdown()


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


# The study runner (`conduct`), once for every study: a toy study of tiny runs whose evaluation
# counts a run's steps, cached beside the run like a study's evaluations.


def count_steps(run: Path) -> dict:
    """The toy study's evaluation (a worker's job): the finished run's steps, cached beside it
    with the process that counted them."""
    cache = run / "count.json"
    if not cache.is_file():
        steps = json.loads(RunDir(run).summary_path.read_text())["steps"]
        write_json_atomic(cache, {"steps": steps, "pid": os.getpid()})
    return json.loads(cache.read_text())


def toy_runs(*names: str) -> list[PlannedRun]:
    return [PlannedRun(name, tiny_config("train.tokens=1280")) for name in names]


class ToyStudy(Study):
    name = "toy"
    evaluated = "step counts"
    collecting = "counting"

    def __init__(self, runs: list[PlannedRun]) -> None:
        self.planned = runs

    def runs(self) -> list[PlannedRun]:
        return self.planned

    def evaluations(self, planned: PlannedRun, run: Path) -> list[Job]:
        def say(result: dict, seconds: float) -> None:
            print(f"  counted count {planned.name}: {result['steps']}")

        return [once_finished(f"count {planned.name}", run, count_steps, say=say)]

    def collect(self, outcomes: list[RunOutcome], quiet: bool) -> dict:
        return {
            "runs": {
                o.name: {"reused": o.reused, "steps": o.summary["steps"], **count_steps(o.path)}
                for o in outcomes
            }
        }

    def write(self, results: dict, out: Path) -> list[Path]:
        (out / "report.md").write_text(", ".join(results["runs"]) + "\n")
        return [out / "report.md"]


def refuse_training(*args, **kwargs):
    raise AssertionError("this process trained a run")


def test_conduct_resumes_an_interrupted_run_then_reuses_every_finished_one(tmp_path, monkeypatch):
    runs = toy_runs("a", "b")
    Trainer(runs[1].config, str(tmp_path / "runs" / "b"), quiet=True).train(stop_after=3)
    results = conduct(ToyStudy(runs), tmp_path, quiet=True, jobs=1).results
    assert {n: (r["reused"], r["steps"]) for n, r in results["runs"].items()} == {
        "a": (False, 10),
        "b": (False, 10),
    }
    steps = [r["step"] for r in train_records(tmp_path / "runs" / "b")]
    assert steps == list(range(1, 11))  # resumed after step 3, not started again
    assert json.loads((tmp_path / "results.json").read_text())["runs"] == results["runs"]
    assert results["workers"]["processes"] == 1
    assert set(results["wall_clock_s"]) == {"training_and_reuse", "counting"}
    assert (tmp_path / "report.md").read_text() == "a, b\n"

    monkeypatch.setattr("fixedfirst.train.trainer.Trainer.train", refuse_training)
    again = conduct(ToyStudy(runs), tmp_path, quiet=True, jobs=2).results
    assert again["workers"]["processes"] == 1  # nothing left to train: no worker processes
    assert {n: r["reused"] for n, r in again["runs"].items()} == {"a": True, "b": True}
    assert {n: r["pid"] for n, r in again["runs"].items()} == {
        n: r["pid"] for n, r in results["runs"].items()
    }  # the evaluations were read back, not made again


def test_side_by_side_the_workers_train_and_evaluate_and_this_process_reads(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setattr("fixedfirst.train.trainer.Trainer.train", refuse_training)  # here only
    results = conduct(ToyStudy(toy_runs("a", "b")), tmp_path, quiet=False, jobs=2).results
    said = capsys.readouterr().out
    assert "2 runs and their step counts side by side in 2 processes of 1 thread(s)" in said
    assert "counted count a: 10" in said and "counted count b: 10" in said
    for run in results["runs"].values():
        assert run["steps"] == 10 and run["pid"] != os.getpid()  # counted in a worker
        assert run["reused"] is False  # trained in this invocation, by a worker
    assert results["workers"] == {"processes": 2, "threads_each": 1}
    assert "side_by_side" in results["wall_clock_s"]


def test_only_trains_a_subset_and_reports_the_runs_finished_before(tmp_path, capsys):
    runs = toy_runs("a", "b", "c")
    other = tiny_config("train.tokens=1280", "train.lr=1e-3")  # c, as another study trained it
    Trainer(other, str(tmp_path / "runs" / "c"), quiet=True).train()
    first = conduct(ToyStudy(runs), tmp_path, False, 1, only=frozenset({"a"})).results
    assert list(first["runs"]) == ["a"]
    assert not (tmp_path / "runs" / "b").exists()
    assert "runs/c: trained with other settings (train.lr); left out" in capsys.readouterr().out
    second = conduct(ToyStudy(runs), tmp_path, True, 1, only=frozenset({"b"})).results
    assert {n: r["reused"] for n, r in second["runs"].items()} == {"a": True, "b": False}
    assert json.loads((tmp_path / "runs" / "c" / "summary.json").read_text())["steps"] == 10
    assert not (tmp_path / "runs" / "c" / "count.json").exists()  # left out, not evaluated


def test_a_study_directory_another_process_writes_is_refused(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path / ".lock")], stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        with pytest.raises(UserError, match="being written by another fixedfirst process"):
            conduct(ToyStudy(toy_runs("a")), tmp_path, quiet=True, jobs=1)
    finally:
        holder.kill()
        holder.wait()
    assert not (tmp_path / "runs").exists() and not (tmp_path / "results.json").exists()


STOPPED_STUDY = """
import sys, time
from pathlib import Path
import fixedfirst.train.trainer as trainer
from fixedfirst.studies.kit.conduct import conduct
from fixedfirst.train.interrupt import TrainingInterrupted
from tests.test_side_by_side import ToyStudy, toy_runs
original = trainer.train_step
def slow(*args, **kwargs):
    time.sleep(0.5)
    return original(*args, **kwargs)
trainer.train_step = slow
out = Path(sys.argv[1])
try:
    conduct(ToyStudy(toy_runs("a")), out, quiet=True, jobs=1)
except TrainingInterrupted as stopped:
    sys.exit(stopped.exit_status)
"""


def test_a_scheduler_stop_leaves_runs_the_next_invocation_resumes(tmp_path):
    root = Path(__file__).resolve().parent.parent
    study = subprocess.Popen(
        [sys.executable, "-c", STOPPED_STUDY, str(tmp_path)], cwd=root, stderr=subprocess.PIPE
    )
    metrics = tmp_path / "runs" / "a" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while len(train_records_or_none(metrics)) < 2 and time.monotonic() < deadline:
        assert study.poll() is None, study.stderr.read().decode()[-2000:]
        time.sleep(0.05)
    study.send_signal(signal.SIGTERM)
    assert study.wait(timeout=120) == 75, study.stderr.read().decode()[-2000:]  # requeue
    stopped = [r["step"] for r in train_records(metrics.parent)]
    assert 2 <= len(stopped) < 10 and not (tmp_path / "results.json").exists()
    results = conduct(ToyStudy(toy_runs("a")), tmp_path, quiet=True, jobs=1).results
    assert results["runs"]["a"]["steps"] == 10
    assert [r["step"] for r in train_records(metrics.parent)] == list(range(1, 11))


def train_records_or_none(metrics: Path) -> list[dict]:
    return train_records(metrics.parent) if metrics.is_file() else []
