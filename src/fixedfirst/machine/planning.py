"""Planning a run on GPUs: will it fit, with which settings, and how long will it take?

For a run configuration and a number of GPUs of one kind, the memory model (compute/memory.py)
gives the per-GPU memory at the deepest depth the schedule draws under DDP and FSDP2, with and
without activation checkpointing, and the largest micro-batch that fits in (1 - MARGIN) of a
GPU's memory; the compute model (compute/plan.py) gives the run's modeled training FLOPs, and
an assumed model FLOP utilisation turns them into wall-clock. Nothing is refused for not fitting:
the plan says what does not fit and what would (a smaller micro-batch, checkpointing, sharding,
more GPUs).
"""

from __future__ import annotations

from dataclasses import dataclass

from fixedfirst.compute.memory import (
    MARGIN,
    Placement,
    TrainingMemory,
    deepest_depth,
    training_memory,
)
from fixedfirst.compute.plan import RunPlan, plan_run
from fixedfirst.config import RunConfig
from fixedfirst.errors import UserError

ASSUMED_MFU = 0.581
"""Model FLOP utilisation assumed for the wall-clock when none is given: our training step at
depth 16 on this project's CPU (benchmarks/depth_eval.py, whose output is
docs/figures/bench-depth-eval.md: 58.1% of the measured matmul peak). No GPU has been measured
yet; benchmarks/gpu_check.py measures it."""

MAX_GPUS = 4096
"""The most GPUs the plan looks at when it searches for a number of them that fits."""


@dataclass(frozen=True)
class Hardware:
    name: str
    gpus: int
    memory: int
    """Bytes per GPU."""
    peak_flops: float
    """Per GPU, in the run's precision."""
    mfu: float

    @property
    def usable(self) -> float:
        return (1 - MARGIN) * self.memory


@dataclass(frozen=True)
class MemoryOption:
    """One way to train: strategy and checkpointing, at the configured and the largest
    micro-batch that fits."""

    strategy: str
    checkpoint: bool
    memory: TrainingMemory
    """At the configured micro-batch."""
    fits: bool
    largest_micro_batch: int | None
    """The largest micro-batch (a divisor of each GPU's share of the batch) that fits."""


@dataclass(frozen=True)
class GpuPlan:
    config: RunConfig
    hardware: Hardware
    run: RunPlan
    depth: int
    """The deepest training depth of the schedule."""
    micro_batch: int
    options: list[MemoryOption]
    configured: MemoryOption
    """The configuration's own strategy and checkpointing."""
    recompute_flops: float
    """What activation checkpointing adds: one more forward of every iteration with gradients."""
    gpus_needed: int | None
    """When nothing fits on `hardware.gpus` GPUs: the fewest that would, sharded (None: none)."""

    def seconds(self, checkpoint: bool) -> float:
        flops = self.run.flops + (self.recompute_flops if checkpoint else 0.0)
        h = self.hardware
        return flops / (h.gpus * h.peak_flops * h.mfu)


def strategies(gpus: int) -> list[str]:
    return ["single"] if gpus == 1 else ["ddp", "fsdp"]


def local_batch(config: RunConfig, gpus: int) -> int:
    """Each GPU's share of the batch; a batch that does not split is refused as `train` would."""
    t = config.train
    micro = t.micro_batch(gpus)
    if t.batch_size % gpus or (t.batch_size // gpus) % micro:
        raise UserError(
            f"train.batch_size = {t.batch_size} must split into {gpus} GPU(s) of whole "
            f"micro-batches of {micro}; change --gpus, train.batch_size or train.micro_batch_size"
        )
    return t.batch_size // gpus


def step_memory(
    config: RunConfig, where: Placement, micro: int, local: int, depth: int, checkpoint: bool
) -> TrainingMemory:
    t = config.train
    return training_memory(
        config.own_model("the memory model (fixedfirst plan)"),
        where,
        micro,
        local // micro,
        t.seq_len,
        depth,
        t.grad_depth,
        checkpoint,
    )


def memory_option(
    config: RunConfig, hardware: Hardware, where: Placement, depth: int, checkpoint: bool
) -> MemoryOption:
    local = local_batch(config, hardware.gpus)
    micro = config.train.micro_batch(hardware.gpus)
    memory = step_memory(config, where, micro, local, depth, checkpoint)
    largest = None
    for candidate in range(local, 0, -1):
        if local % candidate == 0:
            needed = step_memory(config, where, candidate, local, depth, checkpoint).peak
            if needed <= hardware.usable:
                largest = candidate
                break
    return MemoryOption(where.strategy, checkpoint, memory, memory.peak <= hardware.usable, largest)


def placement_on(config: RunConfig, strategy: str, gpus: int) -> Placement:
    bf16 = config.train.precision != "fp32"  # auto, bf16 and fast train in bf16 on a GPU
    # `strategy` is "ddp" or "fsdp", the two this module plans (its callers' literals)
    return Placement("cuda", bf16, strategy, gpus)  # type: ignore[arg-type]


def fewest_gpus(config: RunConfig, hardware: Hardware, depth: int) -> int | None:
    """The fewest GPUs (a power of two dividing the batch) on which FSDP2 with checkpointing
    and micro-batches of one sequence fits, if any does up to MAX_GPUS."""
    gpus = hardware.gpus
    while gpus <= MAX_GPUS:
        gpus *= 2
        if config.train.batch_size % gpus:
            return None
        where = placement_on(config, "fsdp", gpus)
        local = config.train.batch_size // gpus
        if step_memory(config, where, 1, local, depth, True).peak <= hardware.usable:
            return gpus
    return None


def plan_on_gpus(config: RunConfig, hardware: Hardware) -> GpuPlan:
    t = config.train
    run = plan_run(config)
    depth = deepest_depth(run)
    options = [
        memory_option(config, hardware, placement_on(config, s, hardware.gpus), depth, ckpt)
        for s in strategies(hardware.gpus)
        for ckpt in (False, True)
    ]
    strategy = t.strategy if hardware.gpus > 1 else "single"
    configured = next(
        o for o in options if o.strategy == strategy and o.checkpoint == t.checkpoint_activations
    )
    fm = run.flop_model
    graded = (lambda k: k) if t.grad_depth is None else (lambda k: min(k, t.grad_depth))
    per_token = run.histogram().total(lambda k: graded(k) * fm.iteration)
    nothing_fits = all(o.largest_micro_batch is None for o in options)
    return GpuPlan(
        config=config,
        hardware=hardware,
        run=run,
        depth=depth,
        micro_batch=t.micro_batch(hardware.gpus),
        options=options,
        configured=configured,
        recompute_flops=t.tokens_per_step * per_token,
        gpus_needed=fewest_gpus(config, hardware, depth) if nothing_fits else None,
    )
