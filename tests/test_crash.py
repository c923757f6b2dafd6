"""A real crash: SIGKILL a training process mid-run (and mid-checkpoint), resume, same result."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from tests.trainer_helpers import (
    comparable,
    final_weights,
    train_records,
    write_tiny_config,
)

ROOT = Path(__file__).resolve().parents[1]

# Runs the CLI with checkpoint writing slowed down after the weights file, so that a kill can
# land while a checkpoint is half written.
SLOW_CHECKPOINT = """
import sys, time
import fixedfirst.train.checkpoint as checkpoint
original = checkpoint._write_file
def slow(path, write):
    digest = original(path, write)
    if path.name == "model.safetensors":
        time.sleep(float(sys.argv[1]))
    return digest
checkpoint._write_file = slow
from fixedfirst.cli.main import main
main(sys.argv[2:])
"""


def start(args: list[str], delay: float | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + str(ROOT)}
    if delay is None:
        cmd = [sys.executable, "-m", "fixedfirst", *args]
    else:
        cmd = [sys.executable, "-c", SLOW_CHECKPOINT, str(delay), *args]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_for(predicate, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "timed out waiting for the run"
        time.sleep(0.01)


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
    resumed = start(["train", "--out", str(run), "--resume", "--quiet"])
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read().decode()
    assert_same_run(tiny_run.path, run)


def test_sigkill_while_writing_a_checkpoint(tmp_path, tiny_run):
    config_path = write_tiny_config(tmp_path)
    run = tmp_path / "killed"
    proc = start(["train", str(config_path), "--out", str(run), "--quiet"], delay=30.0)
    partial = run / "checkpoints" / ".tmp-step-0000008"
    wait_for(lambda: (partial / "model.safetensors").exists(), proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert partial.exists()  # killed mid-checkpoint: step 8 is half written
    assert not (run / "checkpoints" / "step-0000008").exists()
    resumed = start(["train", "--out", str(run), "--resume", "--quiet"])
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read().decode()
    assert not partial.exists()
    assert_same_run(tiny_run.path, run)
