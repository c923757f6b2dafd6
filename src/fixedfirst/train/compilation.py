"""Whether a run compiles its blocks (`train.compile`), and compiling them.

torch.compile (inductor) turns each block's elementwise work (norms, rotary, SiLU gating,
residual sums) into a few fused loops, generated C++ on a CPU, so a step makes fewer passes
over memory. Each block is compiled on its own and the depth loop stays in Python: a new depth
runs the same compiled blocks more often and never recompiles (a new shape, or switching
between training and no-grad evaluation, does, once each).

Compilation is paid up front, once per process: tens of seconds on a 2-core CPU before the
first step, against a saving of a few percent of every step. So `auto` compiles only a run long
enough to repay it: the eager run time is estimated from the planned modeled FLOPs and the
measured matmul peak (EAGER_MFU), and the run compiles when STEP_SAVING of that exceeds
COLD_COMPILE_S (docs/design.md §10). A machine without a C++ compiler cannot compile for the
CPU, so `auto` stays eager there; `true` asks for compilation regardless.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass

import torch

from fixedfirst.model import LoopedTransformer

COLD_COMPILE_S = 30.0
"""Seconds a run spends compiling with a fresh inductor cache, training and evaluation graphs
(measured: docs/design.md §10), rounded up for a busy machine."""
STEP_SAVING = 0.08
"""Fraction of an eager training step that the compiled blocks save (measured on a CPU:
docs/design.md §10); assumed the same on a GPU, where it is usually larger, so that `auto` errs
towards eager."""
EAGER_MFU = 0.6
"""Model FLOP/s of an eager step as a fraction of the measured matmul peak, for the estimate of
a run's length (measured: docs/design.md §10)."""


@dataclass(frozen=True)
class CompileDecision:
    compile: bool
    reason: str


def compiler_available(device: torch.device) -> bool:
    """Inductor generates C++ for the CPU (it needs a compiler on PATH) and Triton for CUDA."""
    if device.type == "cpu":
        return any(shutil.which(cc) for cc in ("g++", "c++", "clang++"))
    return device.type == "cuda"


def decide(
    setting: bool | str, device: torch.device, run_flops: float, peak_flops: float
) -> CompileDecision:
    """Resolve train.compile for a run that still has `run_flops` modeled FLOPs to train."""
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


def compile_blocks(model: LoopedTransformer) -> None:
    """Compile every block in place (`Module.compile`: parameter names, and so state dicts and
    checkpoints, stay those of the eager model)."""
    for block in (*model.prelude, *model.core, *model.coda):
        block.compile()
