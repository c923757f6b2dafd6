"""Whether a run compiles its loop (`train.compile`), and where the compiled code is kept.

torch.compile (inductor) turns the elementwise work of a layer (norms, rotary, SiLU gating,
residual sums) into a few fused loops, generated C++ on a CPU, so a step makes fewer passes
over memory and fewer calls. `LoopedTransformer.compile_loop` compiles each prelude and coda
block and one core iteration; the depth loop stays in Python, so a new depth runs the same
compiled iteration more often and never recompiles (a new shape, or switching between training
and no-grad evaluation, does, once each).

Compilation is paid once per process before the first step, and most of it only once per
machine: inductor keeps what it generated in a cache directory (TORCHINDUCTOR_CACHE_DIR), and a
process that finds its graphs there loads them instead of generating and building C++ again. A
study points every one of its runs at one directory inside its own (`shared_cache`), so that of
its many runs of one shape only the first pays the cold start. `auto` compiles a run long enough
to repay a cold start on its own: the eager run time is estimated from the planned modeled FLOPs
and the measured matmul peak (EAGER_MFU), and the run compiles when STEP_SAVING of that exceeds
COLD_COMPILE_S (docs/design.md §10; the numbers: docs/guides/study-speed.md). A machine without
a C++ compiler cannot compile for the CPU: `auto` stays eager there and `true` is refused.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from fixedfirst.errors import UserError

COLD_COMPILE_S = 60.0
"""CPU seconds a run spends compiling with a fresh inductor cache: the training graphs of the
study shapes took 40-59 (docs/guides/study-speed.md), and evaluation compiles its own."""
STEP_SAVING = 0.08
"""Fraction of an eager training step that the compiled loop saves (measured on a CPU:
docs/design.md §10); assumed the same on a GPU, where it is usually larger, so that `auto` errs
towards eager."""
EAGER_MFU = 0.6
"""Model FLOP/s of an eager step as a fraction of the measured matmul peak, for the estimate of
a run's length (measured: docs/design.md §10)."""

CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
"""Where inductor keeps compiled graphs (its FX graph and AOTAutograd caches); when unset,
a directory under the system's temporary directory."""
STUDY_CACHE = "compile-cache"
"""The directory inside a study's output directory that its runs share (`shared_cache`)."""


@dataclass(frozen=True)
class CompileDecision:
    compile: bool
    reason: str


def compiler_available(device: torch.device) -> bool:
    """Inductor generates C++ for the CPU (it needs a compiler on PATH) and Triton for CUDA."""
    if device.type == "cpu":
        return any(shutil.which(cc) for cc in ("g++", "c++", "clang++"))
    return device.type == "cuda"


def check_compiler(setting: bool | str, device: torch.device) -> None:
    """`train.compile = true` where nothing can compile for the device: a one-line error
    (raised before the run directory is touched) instead of inductor's traceback at step 1."""
    if setting is True and not compiler_available(device):
        needs = "a C++ compiler (g++, c++ or clang++) on PATH" if device.type == "cpu" else "CUDA"
        raise UserError(
            f"train.compile = true needs {needs} to compile for {device.type}; install one, or "
            "set train.compile = 'auto' (compiles only where it can) or false"
        )


def decide(
    setting: bool | str,
    device: torch.device,
    run_flops: float,
    peak_flops: float,
    never: str | None = None,
) -> CompileDecision:
    """Resolve train.compile for a run that still has `run_flops` modeled FLOPs to train;
    `never`: why the model is never compiled (`LoopedLM.never_compiled`), if it is not."""
    if never is not None:  # `true` was refused with the configuration
        return CompileDecision(False, never)
    if setting is True or setting is False:
        return CompileDecision(setting, "train.compile")
    eager_s = run_flops / (peak_flops * EAGER_MFU)
    if not compiler_available(device):
        return CompileDecision(False, f"auto: no compiler for {device.type}")
    pays = STEP_SAVING * eager_s > COLD_COMPILE_S
    verdict = "repays" if pays else "would not repay"
    return CompileDecision(
        pays,
        f"auto: an estimated {eager_s:.0f} s eager run {verdict} a {COLD_COMPILE_S:.0f} s "
        f"compilation at {STEP_SAVING:.0%} per step",
    )


def cache_directory() -> str | None:
    """The directory this process reads and writes compiled graphs in: CACHE_ENV, which inductor
    sets to its default when it first compiles; None before that, when none was chosen."""
    return os.environ.get(CACHE_ENV) or None


@contextlib.contextmanager
def shared_cache(directory: Path) -> Iterator[None]:
    """While inside, runs started in this process and in the worker processes it starts keep
    their compiled graphs in `directory`, unless the user chose a cache (CACHE_ENV set)."""
    if os.environ.get(CACHE_ENV):
        yield
        return
    os.environ[CACHE_ENV] = str(Path(directory).absolute())
    try:
        yield
    finally:
        os.environ.pop(CACHE_ENV, None)
