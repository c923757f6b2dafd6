"""benchmarks/gpu_check.py on a machine without CUDA: its training rows measure and predict, and
the whole check runs, saying what it skipped (slow: `pytest -m slow tests/test_gpu_check.py`)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import tiny_model_config

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / "benchmarks" / "gpu_check.py"


def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", CHECK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_training_rows_hold_measured_memory_to_the_memory_model():
    rows = gpu_check().train_run(
        torch.device("cpu"), tiny_model_config(), 2, 24, torch.float32, False, 1
    )
    assert [what for what, _ in rows] == [
        "eager, K=4, micro-batch 2 x 24",
        "eager, K=16, micro-batch 2 x 24",
    ]
    for _, result in rows:
        error = re.search(r"memory model [\d.]+ GiB \(([+-][\d.]+)%\)", result)
        assert error is not None and abs(float(error.group(1))) < 15, result
        assert "tokens/s, MFU" in result


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path")
def test_the_gpu_check_runs_on_a_cpu_and_says_what_it_skipped():
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(CHECK)], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| test: ")]
    assert len(rows) == 4 and all(row.endswith("| skipped (needs CUDA) |") for row in rows)
    assert "| training, compiled | skipped (needs CUDA;" in done.stdout
    assert done.stdout.count("memory model") == 2
