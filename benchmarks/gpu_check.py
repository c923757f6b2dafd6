"""The GPU check: what to run, in one command, the day a GPU is lent (meant to take minutes).

    .venv/bin/python benchmarks/gpu_check.py [--steps 5] [--no-compile]

1. The GPU-marked tests (tests/test_gpu.py): bf16 autocast training against fp32, the
   compiled loop against the eager one, FSDP2 on one rank (NCCL) against the plain model,
   cached decoding against the uncached forward, all on CUDA.
2. A short training of configs/lm-200m.toml's model (synthetic tokens, bf16, the trainer's own
   step) at depths 4 and 16, eager and with torch.compile: per run, tokens/s, MFU against the
   matmul peak measured here (`measured_peak_flops` of machine/device.py, as the trainer's MFU),
   and the step's peak memory (`torch.cuda.max_memory_allocated`) against the memory model's
   prediction (fixedfirst/compute/memory.py, which `fixedfirst plan` and the trainer's check
   use), with what the allocator reserved beyond it. The micro-batch is the largest of at most 16
   sequences that the memory model fits in 90% of the GPU at depth 16; one micro-batch per step.

Without CUDA every part that needs it is skipped with a line saying so, and the training runs a
d = 128 model of lm-200m's layout (2 + 6 + 2 layers, vocabulary 2048, 128 tokens) in fp32 on
the CPU, its peak counted by torch's MemTracker, so that the whole script runs (and is tested,
tests/test_gpu_check.py) on a machine without a GPU. Prints one table; exits 1 if a test failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from fixedfirst.compute.flops import flop_model
from fixedfirst.compute.memory import GIB, MARGIN, Placement, training_memory
from fixedfirst.config import ModelConfig, TrainConfig, load_config
from fixedfirst.data.source import Batch
from fixedfirst.machine.device import measured_peak_flops
from fixedfirst.model import LoopedTransformer
from fixedfirst.train.memory_check import is_out_of_memory
from fixedfirst.train.optim import build_optimizer
from fixedfirst.train.parallel import ParallelModel
from fixedfirst.train.peak_memory import step_peak
from fixedfirst.train.step import StepContext, state_seeds, train_step

ROOT = Path(__file__).resolve().parents[1]
DEPTHS = (4, 16)
MAX_MICRO_BATCH = 16


def gpu_tests() -> list[tuple[str, str]]:
    """Run the GPU-marked tests in a fresh process; (check, result) per test, from pytest's
    JUnit report."""
    import tempfile
    import xml.etree.ElementTree as ElementTree

    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.xml"
        command = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider"]
        command += [f"--junitxml={report}", "tests/test_gpu.py"]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        if not report.exists():
            return [("tests/test_gpu.py", f"did not run: {(done.stdout + done.stderr)[-300:]}")]
        cases = ElementTree.parse(report).getroot().iter("testcase")
        rows = []
        for case in cases:
            result = "passed"
            for outcome in ("skipped", "failure", "error"):
                found = case.find(outcome)
                if found is not None:
                    message = found.get("message", "").removeprefix("got skipped: ")
                    result = f"{'failed' if outcome == 'failure' else outcome} ({message[:200]})"
            rows.append((f"test: {case.get('name')}", result))
    return rows


def model_and_batch(device: torch.device) -> tuple[ModelConfig, int, int, torch.dtype]:
    """(model, micro-batch, sequence length, dtype): lm-200m on CUDA, its layout at d = 128 here."""
    preset = load_config(ROOT / "configs" / "lm-200m.toml")
    if device.type != "cuda":
        small = dataclasses.replace(
            preset.model, d_model=128, n_heads=2, vocab_size=2048, max_seq_len=128
        )
        return small, 4, 128, torch.float32
    memory = torch.cuda.get_device_properties(device).total_memory
    where = Placement("cuda", True)
    seq = preset.train.seq_len
    micro = next(
        (
            m
            for m in range(MAX_MICRO_BATCH, 0, -1)
            if training_memory(preset.model, where, m, 1, seq, max(DEPTHS)).peak
            <= (1 - MARGIN) * memory
        ),
        1,
    )
    return preset.model, micro, seq, torch.bfloat16


def train_run(
    device: torch.device, config: ModelConfig, micro: int, seq: int, dtype, compiled: bool, steps
) -> list[tuple[str, str]]:
    """Steps at each depth of DEPTHS: tokens/s, MFU and peak memory against the prediction."""
    torch.manual_seed(0)
    model = LoopedTransformer(config).to(device).train()
    if compiled:
        model.compile_loop()
    train = TrainConfig(batch_size=micro, seq_len=seq)
    optimizer = build_optimizer(model, train)
    x = torch.randint(0, config.vocab_size, (micro, seq + 1), device=device)
    batch = Batch(x[:, :-1], x[:, 1:])
    seeds = state_seeds(0, 0, range(micro))
    context = StepContext(ParallelModel.alone(model), optimizer, train, dtype)
    peak_flops = measured_peak_flops(device.type, dtype)
    fm = flop_model(config, seq)
    where = Placement("cuda" if device.type == "cuda" else "cpu", dtype == torch.bfloat16)
    rows = []
    for depth in DEPTHS:
        what = f"{'compiled' if compiled else 'eager'}, K={depth}, micro-batch {micro} x {seq}"

        def step(depth: int = depth) -> None:
            loss, _ = train_step(context, batch, depth, 1e-4, seeds)
            loss.item()

        try:
            step()  # warm-up: AdamW's state, and the compilation
            times = []
            for _ in range(steps):
                started = time.perf_counter()
                step()
                times.append(time.perf_counter() - started)
            peak = step_peak(device, step, model, optimizer, batch.inputs, batch.targets)
        except (RuntimeError, MemoryError) as error:
            if not is_out_of_memory(error):
                raise
            rows.append((what, f"out of memory ({str(error).splitlines()[0][:120]})"))
            optimizer.zero_grad(set_to_none=True)
            continue
        seconds = statistics.median(times)
        predicted = training_memory(config, where, micro, 1, seq, depth).peak
        reserved = "" if peak.reserved is None else f", reserved {peak.reserved / GIB:.1f} GiB"
        rows.append(
            (
                what,
                f"{micro * seq / seconds:,.0f} tokens/s, MFU "
                f"{micro * seq * fm.train(depth) / seconds / peak_flops:.1%}, peak "
                f"{peak.tensors / GIB:.2f} GiB, memory model {predicted / GIB:.2f} GiB "
                f"({predicted / peak.tensors - 1:+.1%}){reserved}",
            )
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, help="timed steps per depth (5 on CUDA, 2 here)")
    parser.add_argument("--no-compile", action="store_true", help="eager only")
    args = parser.parse_args()
    started = time.perf_counter()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    where = torch.cuda.get_device_name(device) if cuda else "no CUDA: the CPU"
    print(f"GPU check on {where}, torch {torch.__version__}\n")
    rows = gpu_tests()
    config, micro, seq, dtype = model_and_batch(device)
    shape = "lm-200m" if cuda else "lm-200m's layout at d = 128"
    precision = "bf16" if dtype == torch.bfloat16 else "fp32"
    rows.append((f"training: {shape}, {precision}", f"{micro} x {seq} tokens per step"))
    steps = args.steps or (5 if cuda else 2)
    rows += train_run(device, config, micro, seq, dtype, False, steps)
    if args.no_compile:
        rows.append(("training, compiled", "skipped (--no-compile)"))
    elif not cuda:
        rows.append(
            (
                "training, compiled",
                "skipped (needs CUDA; on a CPU compiling takes minutes: tests/test_gpu.py "
                "checks compiled = eager with FIXEDFIRST_GPU_TEST_DEVICE=cpu)",
            )
        )
    else:
        rows += train_run(device, config, micro, seq, dtype, True, steps)
    print("| check | result |\n| --- | --- |")
    for check, result in rows:
        print(f"| {check} | {result} |")
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = time.process_time() + children.ru_utime + children.ru_stime
    print(f"\n{time.perf_counter() - started:.0f} s ({cpu:.0f} s of CPU, the tests' process too)")
    failed = any(r.startswith(("failed", "error", "did not run")) for _, r in rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
