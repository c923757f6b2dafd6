"""A real crash: SIGKILL a training process mid-run (and mid-checkpoint), resume, same result;
and a crash while a checkpoint of the same step is replaced, which keeps one loadable."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.trainer_helpers import (
    comparable,
    final_weights,
    train_records,
    write_tiny_config,
)

ROOT = Path(__file__).resolve().parents[1]

# Runs the CLI with one checkpoint held half written (after its weights file) until a release
# file appears, so that a kill or a second process can land while it is being written; polling,
# not a fixed sleep, so the test waits no longer than it must (300 s bounds a forgotten release).
HELD_CHECKPOINT = """
import sys, time
from pathlib import Path
import fixedfirst.runs.checkpoint as checkpoint
original = checkpoint._write_file
held, release = sys.argv[1], Path(sys.argv[2])
def held_open(path, write):
    digest = original(path, write)
    if path.name == "model.safetensors" and path.parent.name == held:
        deadline = time.monotonic() + 300
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    return digest
checkpoint._write_file = held_open
from fixedfirst.cli.main import main
main(sys.argv[3:])
"""


def start(args: list[str], hold: tuple[str, Path] | None = None) -> subprocess.Popen:
    """The CLI in a new process; `hold` (a temporary checkpoint directory's name, a release
    file) keeps that checkpoint half written until the release file exists."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + str(ROOT)}
    if hold is None:
        cmd = [sys.executable, "-m", "fixedfirst", *args]
    else:
        cmd = [sys.executable, "-c", HELD_CHECKPOINT, hold[0], str(hold[1]), *args]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_for(predicate, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "timed out waiting for the run"
        time.sleep(0.01)


def resume_here(run: Path) -> None:
    """`fixedfirst train --resume` in this process: what a fresh process reads is on disk (the
    interrupted run was another process), and this one has torch loaded already."""
    from fixedfirst.cli.main import main

    with pytest.raises(SystemExit) as resumed:
        main(["train", "--out", str(run), "--resume", "--quiet"])
    assert resumed.value.code == 0


def assert_same_run(a: Path, b: Path) -> None:
    wa, wb = final_weights(a), final_weights(b)
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert comparable(train_records(a)) == comparable(train_records(b))


def test_sigkill_mid_run_then_resume_reproduces_the_weights(tmp_path, tiny_run):
    config_path = write_tiny_config(tmp_path)
    run = tmp_path / "killed"
    proc = start(["train", str(config_path), "--out", str(run), "--quiet"])
    wait_for(lambda: (run / "checkpoints" / "step-0000012" / "meta.json").exists(), proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (run / "summary.json").exists()  # it really died before the end
    resume_here(run)
    assert_same_run(tiny_run.path, run)


def test_sigkill_while_writing_a_checkpoint(tmp_path, tiny_run):
    config_path = write_tiny_config(tmp_path)
    run = tmp_path / "killed"
    partial = run / "checkpoints" / ".tmp-step-0000008"
    never = tmp_path / "never-released"
    proc = start(["train", str(config_path), "--out", str(run), "--quiet"], (partial.name, never))
    wait_for(lambda: (partial / "model.safetensors").exists(), proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert partial.exists()  # killed mid-checkpoint: step 8 is half written
    assert not (run / "checkpoints" / "step-0000008").exists()
    resume_here(run)
    assert not partial.exists()
    assert_same_run(tiny_run.path, run)


class Crash(BaseException):
    """The process dying at this point: nothing after it runs (no except, no cleanup)."""


def test_a_crash_while_a_checkpoint_of_the_same_step_is_replaced(tmp_path, monkeypatch):
    """Saving a step again (the switch and the end at one step, a corrupt checkpoint saved
    anew) must leave a loadable checkpoint of that step at every moment: here the process
    dies after the old one was moved aside and before the new one is renamed in."""
    from fixedfirst.runs import checkpoint
    from fixedfirst.runs.checkpoint import CheckpointManager

    manager = CheckpointManager(tmp_path / "checkpoints")
    meta = {"metrics_bytes": 0}
    manager.save(4, {"w": torch.zeros(3)}, {"state": 1}, meta, ["switch"])
    replace = os.replace

    def dies_before_the_new_one_is_in(source, target):
        if Path(source).name.startswith(".tmp-"):
            raise Crash
        replace(source, target)

    monkeypatch.setattr(checkpoint.os, "replace", dies_before_the_new_one_is_in)
    with pytest.raises(Crash):
        manager.save(4, {"w": torch.ones(3)}, {"state": 2}, meta, ["final"])
    monkeypatch.undo()

    found = manager.latest_valid()  # what eval and --resume read
    assert found is not None and found.step == 4 and found.tags == ["switch"]
    found.verify()
    assert torch.equal(found.load_weights({"w": (3,)})["w"], torch.zeros(3))

    manager.recover_interrupted_writes()  # what --resume does first
    assert sorted(p.name for p in manager.directory.iterdir()) == ["step-0000004"]
    assert manager.all()[0].tags == ["switch"]
    again = manager.save(4, {"w": torch.ones(3)}, {"state": 2}, meta, ["final"])
    assert again.tags == ["final", "switch"]
    assert torch.equal(manager.latest_valid().load_weights({"w": (3,)})["w"], torch.ones(3))
    assert sorted(p.name for p in manager.directory.iterdir()) == ["step-0000004"]


def test_a_failed_rename_puts_the_replaced_checkpoint_back(tmp_path, monkeypatch):
    from fixedfirst.errors import UserError
    from fixedfirst.runs import checkpoint
    from fixedfirst.runs.checkpoint import CheckpointManager

    manager = CheckpointManager(tmp_path / "checkpoints")
    manager.save(4, {"w": torch.zeros(3)}, {}, {"metrics_bytes": 0}, ["switch"])
    replace = os.replace

    def fails_for_the_new_one(source, target):
        if Path(source).name.startswith(".tmp-"):
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(target))
        replace(source, target)

    monkeypatch.setattr(checkpoint.os, "replace", fails_for_the_new_one)
    with pytest.raises(UserError, match=r"the previous checkpoint \(step-0000004\) is intact"):
        manager.save(4, {"w": torch.ones(3)}, {}, {"metrics_bytes": 0}, ["final"])
    monkeypatch.undo()
    assert sorted(p.name for p in manager.directory.iterdir()) == ["step-0000004"]
    assert torch.equal(manager.latest_valid().load_weights({"w": (3,)})["w"], torch.zeros(3))
