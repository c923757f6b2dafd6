"""The trainer's batches on its device, one step ahead and without making the host wait.

A batch is built on the host (windows gathered from memory-mapped shards, documents tokenized,
a task's examples generated). On a GPU that work, and the copy to the device, would sit between
two steps with the device idle; `DeviceBatches` does them for step n + 1 right after step n is
launched, while the device still computes it (the step makes no host sync: docs/design.md
§10). On CUDA the rows are copied from pinned (page-locked) memory with `non_blocking`: a copy
from ordinary memory, or a blocking one, waits for every kernel queued before it.

The source's position runs one batch ahead while a batch waits; `state_dict` is the position
of the batch the next step trains on, so a checkpoint resumes at exactly that batch.
"""

from __future__ import annotations

from typing import Any

import torch

from fixedfirst.data.source import Batch, BatchSource


class DeviceBatches:
    """This rank's rows of each global batch of `source`, on `device`, in the source's order."""

    def __init__(
        self, source: BatchSource, global_batch: int, rank: int, world_size: int, device
    ) -> None:
        self.source = source
        self.global_batch = global_batch
        self.rank, self.world_size = rank, world_size
        self.device = torch.device(device)
        self._ready: Batch | None = None
        self._position: dict[str, Any] = {}
        """The source's position before the batch in `_ready` was drawn."""

    def next(self) -> Batch:
        """The next batch, on the device (the copy may still be in flight: kernels launched
        after this on the device's stream run after it)."""
        if self._ready is None:
            self.prefetch()
        batch, self._ready = self._ready, None
        assert batch is not None
        return batch

    def prefetch(self) -> None:
        """Build the next batch and start its copy to the device (a no-op when one waits)."""
        if self._ready is not None:
            return
        self._position = self.source.state_dict()
        rows = self.source.next_batch(self.global_batch, self.rank, self.world_size)
        self._ready = to_device(rows, self.device)

    def state_dict(self) -> dict[str, Any]:
        """The source's position at the next batch to train on (before one that waits)."""
        return dict(self._position) if self._ready is not None else self.source.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go to `state`; a batch that waited is dropped."""
        self._ready = None
        self.source.load_state_dict(state)


def to_device(batch: Batch, device: torch.device) -> Batch:
    """`batch` on `device` without a blocking copy: through pinned memory on CUDA."""
    if device.type == "cuda" and batch.inputs.device.type == "cpu":
        batch = Batch(batch.inputs.pin_memory(), batch.targets.pin_memory())
    return batch.to(device)
