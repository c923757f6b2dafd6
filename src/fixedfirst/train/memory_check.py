"""Will a training step fit in memory? Asked before the first step, and answered in one line when
the allocator says no after all.

The estimate is the memory model's (fixedfirst/compute/memory.py, docs/design.md §15) at the deepest
depth the run's schedule can draw, with the run's micro-batch, precision, activation
checkpointing and sharding. A run whose estimate exceeds (1 - MARGIN) of the device's memory is
refused before anything is written, naming what to change; `train.check_memory = false` trains
anyway. Running out of memory later (on a device the estimate misjudged, or with the check off)
ends in one line as well, instead of an allocator traceback.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import torch

from fixedfirst.compute.memory import (
    MARGIN,
    Placement,
    TrainingMemory,
    deepest_depth,
    training_memory,
)
from fixedfirst.compute.plan import RunPlan
from fixedfirst.config import ModelConfig, RunConfig
from fixedfirst.errors import UserError
from fixedfirst.model.memory import GIB, device_memory
from fixedfirst.train.distributed import World
from fixedfirst.train.interrupt import resume_command


def placement(
    config: RunConfig, device: torch.device, dtype: torch.dtype, world: World
) -> Placement:
    """How this run trains on `device`: strategy `single` without torchrun (train/parallel.py)."""
    return Placement(
        device="cuda" if device.type == "cuda" else "cpu",
        bf16=dtype == torch.bfloat16,
        strategy=config.train.strategy if world.launched else "single",
        processes=world.world_size,
    )


def estimate(config: RunConfig, where: Placement, plan: RunPlan) -> tuple[TrainingMemory, int]:
    """(per-process memory of the run's dearest step, the depth of that step)."""
    t = config.train
    depth = deepest_depth(plan)
    micro = t.micro_batch(where.processes)
    local = max(1, t.batch_size // where.processes)
    memory = training_memory(
        config.own_model("the memory model (train.check_memory)"),
        where,
        micro,
        max(1, local // micro),
        t.seq_len,
        depth,
        t.grad_depth,
        t.checkpoint_activations,
    )
    return memory, depth


def check_training_memory(
    config: RunConfig, where: Placement, plan: RunPlan, capacity: int | None = None
) -> None:
    """Refuse, in one line, a run whose estimated step does not fit in (1 - MARGIN) of
    `capacity` bytes (default: the device's memory, a CPU's shared by the run's processes on
    it; unknown: no check)."""
    t, model = config.train, config.model
    if not t.check_memory or not isinstance(model, ModelConfig):
        return  # the memory model is our model's; a run of another says so in its log
    if capacity is None:
        capacity = device_memory(torch.device(where.device))
        if capacity is not None and where.device == "cpu":  # the processes here share it
            capacity //= int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if capacity is None:
        return
    memory, depth = estimate(config, where, plan)
    usable = (1 - MARGIN) * capacity
    if memory.peak <= usable:
        return
    device = "this GPU's memory" if where.device == "cuda" else "this cpu's memory"
    sharded = f", sharded over {where.processes} processes" if where.shards > 1 else ""
    state = memory.parameters + memory.optimizer + memory.gradients
    if state > capacity:
        raise UserError(
            f"the model's weights, gradients and AdamW state alone need {state / GIB:,.1f} GiB "
            f"per process{sharded} (model.d_model = {model.d_model}, vocab_size = "
            f"{model.vocab_size}), more than {device}; make the model smaller"
            + ("" if where.shards > 1 else ' or shard it over GPUs (train.strategy = "fsdp")')
        )
    changes = []
    if t.micro_batch(where.processes) > 1:
        changes.append("lower train.micro_batch_size")
    if not t.checkpoint_activations:
        changes.append("set train.checkpoint_activations = true")
    raise UserError(
        f"a training step needs an estimated {memory.peak / GIB:,.1f} GiB per process at depth "
        f"{depth} with micro-batches of {t.micro_batch(where.processes)} (activations "
        f"{memory.activations / GIB:,.1f} GiB), more than {1 - MARGIN:.0%} of {device}; "
        + " or ".join(changes or ["make the model smaller"])
        + " (`fixedfirst plan` shows what fits), or set train.check_memory = false to try anyway"
    )


def is_out_of_memory(error: BaseException) -> bool:
    """The allocator's refusal: CUDA's OutOfMemoryError, the CPU allocator's RuntimeError."""
    if isinstance(error, (MemoryError, torch.OutOfMemoryError)):
        return True
    return isinstance(error, RuntimeError) and "can't allocate memory" in str(error)


@contextlib.contextmanager
def explained(trainer: Any) -> Iterator[None]:
    """Around a `Trainer`'s training: turn running out of memory into one line naming the step,
    the estimate and what to change; the run's checkpoints are untouched, so it resumes with the
    change."""
    try:
        yield
    except (RuntimeError, MemoryError) as error:
        if not is_out_of_memory(error):
            raise
        t = trainer.config.train
        step = trainer.counters.step
        depth = trainer.scheduler.plan.depth(step)
        micro = t.micro_batch(trainer.world_size)
        estimated = ""
        if isinstance(trainer.config.model, ModelConfig):
            memory, _ = estimate(trainer.config, trainer.memory_placement, trainer.scheduler.plan)
            estimated = (
                f"; the memory model estimated {memory.peak / GIB:,.1f} GiB per process for "
                "the run's deepest step"
            )
        change = "--set train.checkpoint_activations=true"
        if micro > 1:
            change = f"--set train.micro_batch_size={largest_divisor_below(micro)}"
        raise UserError(
            f"out of {trainer.device.type} memory in step {step + 1} (depth {depth}, "
            f"micro-batches of {micro}{estimated}); lower train.micro_batch_size or set "
            f"train.checkpoint_activations = true, e.g. "
            f"`{resume_command(trainer.run.path, trainer.world_size)} {change}`"
        ) from None


def largest_divisor_below(n: int) -> int:
    """The largest divisor of n below n (a micro-batch that still divides the batch)."""
    return next(k for k in range(n // 2, 0, -1) if n % k == 0)
