"""The device a run uses and the peak FLOP rate its MFU is measured against.

MFU = achieved model FLOP/s / peak FLOP/s. We never hard-code a peak: on any device we time a
large matrix multiply in the run's compute dtype and take the best of a few repeats, so MFU on a
2-core CPU and on an H200 mean the same thing ("fraction of what a plain matmul reaches here").
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


@cache
def measured_peak_flops(device_type: str = "cpu", dtype: torch.dtype = torch.float32) -> float:
    """Best FLOP/s of an n x n matmul on this device (n = 1024 on CPU, 8192 on CUDA)."""
    device = torch.device(device_type)
    n = 8192 if device.type == "cuda" else 1024
    # Constant operands: the timing must not consume (and so shift) the global RNG stream.
    a = torch.full((n, n), 0.5, device=device, dtype=dtype)
    b = torch.full((n, n), 0.25, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(5):
        _synchronize(device)
        t0 = time.perf_counter()
        torch.mm(a, b)
        _synchronize(device)
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best
