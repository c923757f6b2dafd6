"""The device a run uses, its CPU threads, and the peak FLOP rate its MFU is measured against.

No peak is hard-coded: square matmuls are timed on the device in the run's dtype and threads, so
MFU means "fraction of what a plain matmul reaches here" on any machine, unless
FIXEDFIRST_PEAK_FLOPS gives one. A run takes the cores that are idle when it starts
(`choose_threads`), since a thread on a busy core stalls every parallel region of a step
(docs/design.md §3, §10).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Iterator
from functools import cache

import torch

from fixedfirst.errors import UserError


def resolve_device(name: str, setting: str = "train.device") -> torch.device:
    """`auto` -> cuda when available, else cpu; asking for cuda without one is a user error,
    which names the `setting` that asked (a configuration key, or a command's --device)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        asked = f"{setting} = 'cuda'" if "." in setting else f"{setting} cuda"
        raise UserError(f"{asked} but no CUDA device is here; use 'auto' or 'cpu'")
    return torch.device(name)


ALLOCATOR_ENV = "PYTORCH_CUDA_ALLOC_CONF"
EXPANDABLE = "expandable_segments:True"
"""The CUDA allocator's setting the trainer asks for when nobody chose one: memory grows by
mapping more pages into one segment instead of allocating blocks of new sizes, so the blocks
that depths of different activation sizes leave behind do not fragment it (docs/design.md §8)."""


def cuda_settings(device: torch.device) -> None:
    """A training process's CUDA settings, before its first allocation: TF32 for the float32
    matmuls (the optimizer's and autocast's fp32 work; bf16 matmuls are unaffected; fp32
    evaluation turns it off, `exact_float32`), and the allocator's expandable segments unless
    ALLOCATOR_ENV (or torch's newer PYTORCH_ALLOC_CONF) says otherwise. Nothing on the CPU."""
    if device.type != "cuda":
        return
    torch.set_float32_matmul_precision("high")
    chosen = os.environ.get(ALLOCATOR_ENV) or os.environ.get("PYTORCH_ALLOC_CONF")
    if not chosen and not torch.cuda.is_initialized():
        os.environ[ALLOCATOR_ENV] = EXPANDABLE


@contextlib.contextmanager
def exact_float32() -> Iterator[None]:
    """float32 matmuls in full float32 (no TF32) while inside: what a CPU computes, so that an
    evaluation on a GPU can be compared with one there."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def resolve_dtype(precision: str, device: torch.device) -> torch.dtype:
    """`auto` -> bf16 autocast on CUDA, fp32 on CPU; `fast` -> bf16 autocast on a GPU that
    supports bf16 and on a CPU that multiplies bf16 matrices at least BF16_FASTER times as fast
    as fp32 (native bf16 arithmetic such as AVX512-BF16 or AMX; measured once per process), fp32
    elsewhere. Decided again whenever a process starts: a run resumed on another machine may
    continue in the other precision (the trainer's log line says which)."""
    if precision == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if precision == "fast":
        if device.type == "cuda":
            fast = torch.cuda.is_bf16_supported()
        else:
            fast = bf16_speedup(device.type) >= BF16_FASTER
        return torch.bfloat16 if fast else torch.float32
    return torch.bfloat16 if precision == "bf16" else torch.float32


BF16_FASTER = 1.5
"""How much faster a bf16 matmul must be than fp32 for `precision = "fast"` to pick bf16. A CPU
without native bf16 emulates it and is far slower (the project's 2-core AMD EPYC, AVX2 only:
about a hundredth of fp32's rate, docs/guides/study-speed.md); with it, the project's earlier
2-core CPU (AVX512-BF16) multiplied 1024^2 matrices 4.1-4.7x as fast (`bf16_speedup`, two and
one threads), and the bios demo's d = 128 runs trained in 0.83x the time
(benchmarks/demo_speed.py): the matmuls are faster, the rest of the step is not."""


@cache
def bf16_speedup(device_type: str, n: int = 1024) -> float:
    """fp32 time / bf16 time of an n x n matmul here (best of 3, warmed up; about 0.1 s on a CPU
    with native bf16, longer on one that emulates it)."""
    device = torch.device(device_type)
    fp32 = best_matmul_seconds(device, torch.float32, n, 3)
    return fp32 / best_matmul_seconds(device, torch.bfloat16, n, 3)


IDLE_SAMPLE_S = 0.2
"""How long `free_cores` watches the CPUs: long enough to see a busy core as busy."""


def _cpu_times(cpus: set[int]) -> dict[int, tuple[int, int]]:
    """cpu -> (idle, total) jiffies from /proc/stat, for the given cpus."""
    times = {}
    with open("/proc/stat") as f:
        for line in f:
            name, *fields = line.split()
            if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
                continue
            values = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
            times[int(name[3:])] = (values[3] + values[4], sum(values))
    return times


def free_cores() -> int:
    """How many of this process's CPUs are idle: the summed idle fraction of each CPU over
    IDLE_SAMPLE_S (this process sleeps meanwhile), rounded, at least 1. Where /proc/stat is not
    readable (not Linux), every CPU this process may use counts as free."""
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    available = len(cpus) if cpus else os.cpu_count() or 1
    try:
        before = _cpu_times(cpus or set(range(available)))
        time.sleep(IDLE_SAMPLE_S)
        after = _cpu_times(cpus or set(range(available)))
    except (OSError, ValueError):
        return available
    idle = 0.0
    for cpu, (idle_after, total_after) in after.items():
        idle_before, total_before = before.get(cpu, (idle_after, total_after))
        if total_after > total_before:
            idle += (idle_after - idle_before) / (total_after - total_before)
    return max(1, min(available, round(idle))) if after else available


def choose_threads(requested: int | None, processes_here: int = 1) -> tuple[int, str]:
    """(threads, why): `requested` (train.threads) when set, else OMP_NUM_THREADS when set,
    else this machine's free cores shared among the run's `processes_here` processes."""
    if requested is not None:
        return requested, "train.threads"
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) >= 1:
        return int(env), "OMP_NUM_THREADS"
    free = free_cores()
    return max(1, free // max(1, processes_here)), f"{free} free core(s)"


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


PEAK_SIZES = {"cpu": (512, 1024, 2048), "cuda": (4096, 8192)}
"""Matmul sizes timed for the peak. One size is not enough: on this project's 2-core CPU a
1024^3 product reaches 20-40% less than 2048^3 with two threads, which would inflate every MFU
by 1.25-1.5x; on a GPU small products do not fill the device."""


PEAK_FLOPS_ENV = "FIXEDFIRST_PEAK_FLOPS"
"""A run's MFU is measured against this peak (FLOP/s of one process's device in the run's
precision) instead of the measured one: a datasheet's figure, or a figure measured once that
spares many short runs the second each spends timing matmuls."""


def given_peak_flops() -> float | None:
    """PEAK_FLOPS_ENV as a rate, None when it is unset; anything but a positive rate is refused."""
    given = os.environ.get(PEAK_FLOPS_ENV, "").strip()
    if not given:
        return None
    try:
        peak = float(given)
    except ValueError:
        peak = math.nan
    if not (math.isfinite(peak) and peak > 0):
        raise UserError(
            f"{PEAK_FLOPS_ENV}={given!r} is not a peak rate: give the FLOP/s of one process's "
            "device as a positive number (e.g. 1.5e11), or unset it to measure the peak"
        )
    return peak


def run_peak_flops(device_type: str, dtype: torch.dtype, given: float | None) -> tuple[float, str]:
    """The peak a run's MFU is measured against and where it comes from: `given`
    (`given_peak_flops`, read while the run's settings are checked) or measured here."""
    if given is None:
        return measured_peak_flops(device_type, dtype), "measured"
    return given, PEAK_FLOPS_ENV


def measured_peak_flops(device_type: str = "cpu", dtype: torch.dtype = torch.float32) -> float:
    """The best FLOP/s of an n x n matmul on this device over a few sizes n (PEAK_SIZES), each
    warmed up first and timed as the best of several repeats (about a second in all on CPU),
    with the current number of torch threads (measured once per thread count)."""
    return _peak_flops(device_type, dtype, torch.get_num_threads())


@cache
def _peak_flops(device_type: str, dtype: torch.dtype, threads: int) -> float:
    device = torch.device(device_type)
    sizes = PEAK_SIZES["cuda" if device.type == "cuda" else "cpu"]
    return max(
        2 * n**3 / best_matmul_seconds(device, dtype, n, 3 if n >= 2048 else 5) for n in sizes
    )


def best_matmul_seconds(device: torch.device, dtype: torch.dtype, n: int, repeats: int) -> float:
    """The fastest of `repeats` n x n matmuls after one warm-up (thread pool, allocator, kernel
    selection), on random operands: a GPU multiplies low-entropy data (constants, zeros) faster
    than a training step's (894 against 788 TFLOP/s in bf16 on an H200), which would lower every
    MFU. Drawn from a generator of their own, so that timing does not shift the global RNG."""
    generator = torch.Generator(device=device).manual_seed(0)
    a, b = (torch.randn(n, n, device=device, generator=generator).to(dtype) for _ in range(2))
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        _synchronize(device)
        t0 = time.perf_counter()
        torch.mm(a, b)
        _synchronize(device)
        best = min(best, time.perf_counter() - t0)
    return best
