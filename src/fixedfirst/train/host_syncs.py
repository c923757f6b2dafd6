"""Counting a step's host syncs: the operations after which Python waits for the device.

A GPU step runs ahead of Python only while nothing asks the device for a value. Reading a
scalar (`.item()`, `bool(t)`, `int(t)`), an output whose size depends on the data (`nonzero`,
boolean indexing, `masked_select`, `unique`), comparing whole tensors (`torch.equal`) and a
blocking copy to or from the host each wait for every kernel queued before them: the GPU
empties, and the next kernels start only once Python has launched them again. The trainer
keeps them to its log lines (docs/design.md §10).

`HostSyncCounter` is a dispatch mode that counts these operations as they are dispatched, so
it finds them on the CPU too, where nothing waits: the tests hold a training step and the
trainer's batch path to none. On CUDA, `torch.cuda.set_sync_debug_mode` is the driver's own
check; benchmarks/first_run.py reports both.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

READS_A_VALUE = {
    "_local_scalar_dense",  # .item(), int(t), float(t), bool(t)
    "is_nonzero",
    "equal",
    "nonzero",
    "masked_select",
    "_unique",
    "_unique2",
    "unique_dim",
    "unique_consecutive",
    "bincount",
}
"""Operations (aten names, every overload) that read a value, or size their output by one,
on the host."""

INDEXING = {"index", "index_put", "index_put_"}


def _is_boolean_index(name: str, args: tuple[Any, ...]) -> bool:
    """`x[mask]` and `x[mask] = y`: a boolean index is turned into positions (a nonzero)
    inside the kernel, below where a dispatch mode looks."""
    if name not in INDEXING:
        return False
    indices = args[1] if len(args) > 1 else ()
    return any(
        isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices
    )


def _is_blocking_copy(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """A copy between the host and a device that the host waits for: one without
    `non_blocking`, either way. (A `non_blocking` copy from memory that is not pinned waits as
    well; data/prefetch.py pins what it copies.)"""
    if name == "_to_copy":
        source = args[0]
        target = kwargs.get("device") or source.device
        non_blocking = kwargs.get("non_blocking", False)
    elif name == "copy_":
        target, source = args[0].device, args[1]
        non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
    else:
        return False
    if not isinstance(source, torch.Tensor) or source.device == torch.device(target):
        return False
    return not non_blocking


class HostSyncCounter(TorchDispatchMode):
    """`with HostSyncCounter() as syncs: ...`; then `syncs.total` and `syncs.by_op` (op name ->
    count) say which operations would have made the host wait for the device."""

    def __init__(self) -> None:
        super().__init__()
        self.by_op: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self.by_op.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if (
            name in READS_A_VALUE
            or _is_boolean_index(name, args)
            or _is_blocking_copy(name, args, kwargs)
        ):
            self.by_op[name] += 1
        return func(*args, **kwargs)
