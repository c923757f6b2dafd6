"""Checkpoints written beside the training: rank 0's thread writes, every rank trains on.

Writing a checkpoint is mostly waiting for a disk (lm-1b's full state is 16 GB). Every rank
takes part in gathering the full state into rank 0's host memory (`ParallelModel.full_state`:
a collective of device-to-host copies); then rank 0 hands it to a thread that writes it
(runs/checkpoint.py: temporary name, checksums, rename) and the steps go on meanwhile. Whether
it reached the disk is settled where it must be: before the next checkpoint (one write at a time,
and a failed one stops the run there with its one line), before a run stopped by a signal names
it in the resume command, and at the end. Every rank learns the outcome from rank 0 through the
`patient` group (train/distributed.py), so that a slow disk does not look like a hung peer to
the run's collective timeout (docs/design.md §7-8).

The thread writes its own copy: a tensor the training updates in place (the model's own
parameters and AdamW's moments, which a CPU run's full state is) is copied first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

from fixedfirst.runs.checkpoint import Checkpoint, CheckpointManager
from fixedfirst.train import distributed
from fixedfirst.train.distributed import World

Contents = tuple[dict[str, torch.Tensor], dict[str, Any], dict[str, Any]]
"""A checkpoint's (weights, trainer state, meta)."""


class CheckpointWrites:
    """The run's checkpoint writes; every rank calls `start` and `settle` at the same steps."""

    def __init__(
        self, world: World, checkpoints: CheckpointManager, live: Callable[[], set[int]]
    ) -> None:
        self.world = world
        self.checkpoints = checkpoints
        self.live = live
        """The storages the training updates in place (their data pointers)."""
        self._pending = False
        self._thread: threading.Thread | None = None
        self._outcome: Checkpoint | BaseException | None = None

    def start(self, step: int, tags: list[str], contents: Callable[[], Contents]) -> None:
        """Write checkpoint `step` with `tags`: `contents()` is taken on rank 0 now, written by
        its thread. A write still in flight is settled first (and raises if it failed)."""
        self.settle()
        self._pending = True
        if not self.world.is_main:
            return
        weights, state, meta = own_copy(contents(), self.live())

        def write() -> None:
            try:
                self._outcome = self.checkpoints.save(step, weights, state, meta, tags)
            except BaseException as error:  # raised again where the write is settled
                self._outcome = error

        self._thread = threading.Thread(target=write, name=f"checkpoint-{step}", daemon=True)
        self._thread.start()

    def settle(self) -> Checkpoint | None:
        """Wait until the write in flight is on disk and return its checkpoint (None when none
        was in flight), on every rank alike; its error, raised on every rank, if it failed."""
        if not self._pending:
            return None
        self._pending = False
        return distributed.on_main(self.world, self._finished, patiently=True)

    def _finished(self) -> Checkpoint:
        self.close()
        outcome, self._outcome = self._outcome, None
        if isinstance(outcome, BaseException):
            raise outcome
        assert outcome is not None
        return outcome

    def close(self) -> None:
        """Let a write in flight finish (this process only: the run ends, or ends in an error
        already, and keeps its lock until the checkpoint is complete)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None


def own_copy(contents: Contents, live: set[int]) -> Contents:
    """`contents` with every tensor whose storage is in `live` copied."""

    def copy(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            pointer = value.untyped_storage().data_ptr()
            return value.clone() if pointer and pointer in live else value
        if isinstance(value, dict):
            return {k: copy(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(copy(v) for v in value)
        return value

    weights, state, meta = contents
    return copy(weights), copy(state), meta


def live_storages(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> set[int]:
    """The data pointers of `model`'s parameters and buffers and of `optimizer`'s state."""
    tensors = [*model.parameters(), *model.buffers()]
    for state in optimizer.state.values():
        tensors += [v for v in state.values() if isinstance(v, torch.Tensor)]
    local = [t.to_local() if hasattr(t, "to_local") else t for t in tensors]  # a DTensor's shard
    return {t.untyped_storage().data_ptr() for t in local}
