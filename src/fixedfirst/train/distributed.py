"""Many processes under torchrun: who this process is, the process group, the few collectives.

torchrun starts one process per device and tells each who it is through the environment (RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT); `World.from_env` reads it. Without torchrun the
world is one process, no process group exists and every collective here is the identity, so the
trainer has a single code path.

Decisions only rank 0 can make, because only rank 0 writes the run directory (is it free? which
checkpoint is the newest valid one? did the checkpoint reach the disk?), go through `on_main`:
rank 0 runs the function and broadcasts its result, or its UserError, so that every rank goes on,
or stops with the same one-line message, together.

Failures: a rank that dies (killed, out of memory) makes its peers' next collective fail (gloo:
"connection closed by peer"; NCCL: the watchdog aborts the communicator) and torchrun stops the
remaining processes. A rank that hangs without dying is caught by the process-group timeout.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from fixedfirst.errors import UserError

T = TypeVar("T")

TIMEOUT_ENV = "FIXEDFIRST_DIST_TIMEOUT"
DEFAULT_TIMEOUT_S = 600.0
"""How long a collective may wait for a peer before the run fails. The longest legitimate wait is
every rank waiting while rank 0 writes a checkpoint (a 1B-parameter model with AdamW is ~16 GB of
float32 state) or while one rank finishes a slow step; ten minutes covers that with a wide margin
and still turns a hung peer into an error instead of a run that sits idle for hours.
`FIXEDFIRST_DIST_TIMEOUT` (seconds) overrides it."""


@dataclass(frozen=True)
class World:
    """This process's place among the processes of the run."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    launched: bool = False
    """Started by torchrun: a process group is used (even with one process)."""
    local_world_size: int = 1
    """The run's processes on this machine (which share its cores)."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_env(cls) -> World:
        """The world torchrun describes in the environment, or a single process."""
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            return cls()
        try:
            rank = int(os.environ["RANK"])
            world_size = int(os.environ["WORLD_SIZE"])
            local_rank = int(os.environ.get("LOCAL_RANK", "0"))
            local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        except ValueError:
            raise UserError(
                "RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE must be integers (they are set "
                "by torchrun)"
            ) from None
        if not 0 <= rank < world_size:
            raise UserError(f"RANK = {rank} is outside 0..WORLD_SIZE-1 = {world_size - 1}")
        return cls(rank, world_size, local_rank, launched=True, local_world_size=local_world_size)


def process_device(world: World, device: torch.device) -> torch.device:
    """Each process on a machine drives its own GPU: cuda:LOCAL_RANK."""
    if device.type != "cuda" or not world.launched:
        return device
    if world.local_rank >= torch.cuda.device_count():
        raise UserError(
            f"LOCAL_RANK = {world.local_rank} but this machine has "
            f"{torch.cuda.device_count()} CUDA device(s); lower --nproc_per_node"
        )
    device = torch.device("cuda", world.local_rank)
    torch.cuda.set_device(device)
    return device


def timeout() -> timedelta:
    raw = os.environ.get(TIMEOUT_ENV)
    if raw is None:
        return timedelta(seconds=DEFAULT_TIMEOUT_S)
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise UserError(f"{TIMEOUT_ENV} = {raw!r}: expected a number of seconds > 0")
    return timedelta(seconds=seconds)


PATIENT_TIMEOUT_S = 4 * 3600.0
"""How long a process may wait for another's work on its disk: rank 0 writing a checkpoint
(16 GB of state for a 1B-parameter model, on a network file system at tens of MB/s), a
machine's first process checking the data's checksums. Such waits go through a group of their
own (`patient`), so that the collectives of training keep their short timeout."""

_patient: dist.ProcessGroup | None = None


def start(world: World, device: torch.device) -> None:
    """Join the process group (NCCL between GPUs, gloo between CPU processes), and a gloo group
    on the same processes for the waits on a disk (`patient`)."""
    global _patient
    if not world.launched or dist.is_initialized():
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(
        backend,
        timeout=timeout(),
        device_id=device if device.type == "cuda" else None,
    )
    waits = max(timeout(), timedelta(seconds=PATIENT_TIMEOUT_S))
    _patient = dist.new_group(backend="gloo", timeout=waits)


def patient() -> dist.ProcessGroup | None:
    """The group for waits on a disk (None before `start`, or without a process group)."""
    return _patient if dist.is_initialized() else None


def stop() -> None:
    """Leave the process group (a no-op without one). Call it once the trainer is gone.

    Whatever drops the last reference to gloo's process group joins its worker threads, and a
    worker still releasing a finished collective's tensors needs the GIL to do so. Dropped from
    `destroy_process_group`, the process group's own binding lets the GIL go first; dropped from
    a DDP Reducer's destructor (the trainer's model freed after this call), it does not, and the
    process hangs at exit (seen one run in three on two loaded cores). So the model goes first
    (`gc.collect` for any cycle that still holds it) and the process group last."""
    global _patient
    if dist.is_initialized():
        gc.collect()
        _patient = None
        dist.destroy_process_group()


def broadcast_object(world: World, obj: T, patiently: bool = False) -> T:
    """Rank 0's `obj` on every rank (small picklable objects only); `patiently`: through the
    `patient` group, for waits on rank 0's disk."""
    if not world.launched:
        return obj
    box = [obj]  # the other ranks' entry is replaced by rank 0's
    dist.broadcast_object_list(box, src=0, group=patient() if patiently else None)
    return box[0]


def on_main(world: World, fn: Callable[[], T], patiently: bool = False) -> T:
    """Run `fn` on rank 0 only; every rank returns its result or raises its UserError
    (`patiently`: the others wait through the `patient` group)."""
    if not world.launched:
        return fn()
    outcome: tuple[str, Any] = ("ok", None)
    if world.is_main:
        try:
            outcome = ("ok", fn())
        except UserError as e:
            outcome = ("error", str(e))
    kind, value = broadcast_object(world, outcome, patiently)
    if kind == "error":
        raise UserError(value)
    return value


def once_per_machine(world: World, fn: Callable[[], None]) -> bool:
    """Run `fn` on each machine's first process (LOCAL_RANK 0) while the others wait (through
    the `patient` group); every process raises the first UserError any of them raised. True
    where `fn` ran: elsewhere the caller takes its machine's word for it."""
    if not world.launched:
        fn()
        return True
    error = None
    if world.local_rank == 0:
        try:
            fn()
        except UserError as e:
            error = str(e)
    errors: list[str | None] = [None] * world.world_size
    dist.all_gather_object(errors, error, group=patient())
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        raise UserError(first)
    return world.local_rank == 0


def gather(world: World, tensor: torch.Tensor) -> torch.Tensor:
    """Every rank's `tensor`, stacked in rank order: shape (world_size, *tensor.shape)."""
    if not world.launched:
        return tensor.unsqueeze(0)
    parts = [torch.empty_like(tensor) for _ in range(world.world_size)]
    dist.all_gather(parts, tensor.contiguous())
    return torch.stack(parts)


def all_sum(world: World, tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` summed over every rank (a new tensor; `tensor` itself on a single process)."""
    if not world.launched:
        return tensor
    total = tensor.clone()
    dist.all_reduce(total)
    return total
