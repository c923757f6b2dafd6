"""The device a run uses and the peak FLOP rate its MFU is measured against.

MFU = achieved model FLOP/s / peak FLOP/s. We never hard-code a peak: on any device we time
square matrix multiplies of a few sizes in the run's compute dtype, warmed up, and take the best
rate, so MFU on a 2-core CPU and on an H200 mean the same thing ("fraction of what a plain
matmul reaches here").
"""

from __future__ import annotations

import time
from functools import cache

import torch

from fixedfirst.errors import UserError


def resolve_device(name: str) -> torch.device:
    """`auto` -> cuda when available, else cpu; asking for cuda without one is a user error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("train.device = 'cuda' but no CUDA device is here; use 'auto' or 'cpu'")
    return torch.device(name)


def resolve_dtype(precision: str, device: torch.device) -> torch.dtype:
    """`auto` -> bf16 autocast on CUDA, fp32 on CPU."""
    if precision == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return torch.bfloat16 if precision == "bf16" else torch.float32


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


PEAK_SIZES = {"cpu": (512, 1024, 2048), "cuda": (4096, 8192)}
"""Matmul sizes timed for the peak. One size is not enough: on this project's 2-core CPU a
1024^3 product reaches 20-40% less than 2048^3 with two threads, which would inflate every MFU
by 1.25-1.5x; on a GPU small products do not fill the device."""


@cache
def measured_peak_flops(device_type: str = "cpu", dtype: torch.dtype = torch.float32) -> float:
    """The best FLOP/s of an n x n matmul on this device over a few sizes n (PEAK_SIZES), each
    warmed up first and timed as the best of several repeats (about a second in all on CPU)."""
    device = torch.device(device_type)
    best_rate = 0.0
    for n in PEAK_SIZES["cuda" if device.type == "cuda" else "cpu"]:
        # Constant operands: the timing must not consume (and so shift) the global RNG stream.
        a = torch.full((n, n), 0.5, device=device, dtype=dtype)
        b = torch.full((n, n), 0.25, device=device, dtype=dtype)
        torch.mm(a, b)  # warm-up: thread pool, allocator, kernel selection
        repeats = 3 if n >= 2048 else 5
        for _ in range(repeats):
            _synchronize(device)
            t0 = time.perf_counter()
            torch.mm(a, b)
            _synchronize(device)
            best_rate = max(best_rate, 2 * n**3 / (time.perf_counter() - t0))
    return best_rate
