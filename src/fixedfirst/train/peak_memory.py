"""The peak tensor memory of one training step, measured: what the memory model predicts.

On CUDA, the caching allocator's own count (`torch.cuda.max_memory_allocated`, tensors only; the
reserved pool beyond it is reported beside it). Elsewhere, torch's MemTracker, which follows
every tensor storage created or held during the step (parameters, gradients, optimizer state,
activations, temporaries) and records the most alive at once; it works under FakeTensorMode
too, which is how paper-scale models are accounted for without their memory. MemTracker refuses
a model called twice in one step, so a measured step has one micro-batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class MeasuredPeak:
    tensors: int
    """The most bytes of tensors alive at once during the step."""
    reserved: int | None
    """CUDA only: the most bytes the allocator held from the device (tensors and its cache)."""


def step_peak(
    device: torch.device,
    step: Callable[[], None],
    *held: torch.nn.Module | torch.optim.Optimizer | torch.Tensor,
) -> MeasuredPeak:
    """Run `step` once and measure its peak; `held` are the model, optimizer and batch tensors
    that exist before the step (counted on CPU, where only what is named is tracked)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        torch.cuda.synchronize(device)
        return MeasuredPeak(
            torch.cuda.max_memory_allocated(device), torch.cuda.max_memory_reserved(device)
        )
    from torch.distributed._tools.mem_tracker import MemTracker

    tracker = MemTracker()
    tracker.track_external(*held)
    with tracker:
        step()
    return MeasuredPeak(tracker.get_tracker_snapshot("peak")[device]["Total"], None)
