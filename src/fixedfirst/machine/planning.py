"""Planning a run on GPUs: will it fit, with which settings, and how long will it take?

For a run configuration and a number of GPUs of one kind, the memory model (compute/memory.py)
gives the per-GPU memory at the deepest depth the schedule draws under DDP and FSDP2, with and
without activation checkpointing, and the largest micro-batch that fits in (1 - MARGIN) of a
GPU's memory; the compute model (compute/plan.py) gives the modeled FLOPs of every depth the run
draws, and each depth's model FLOP utilisation on a GPU turns them into wall-clock: a step at
depth 1 is mostly the prelude, coda and head, a step at depth 16 mostly the core, and a GPU runs
them at different fractions of its peak. The MFU comes from where it is measured: a first run's
output (benchmarks/first_run.py, `measured_mfu`), else a published GPU figure (REFERENCE_MFU),
never a CPU's. Nothing is refused for not fitting: the plan says what does not fit and what would
(a smaller micro-batch, checkpointing, sharding, more GPUs).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Protocol

from fixedfirst.compute.flops import CostModel, flop_model
from fixedfirst.compute.looped_flops import ShapeFlops
from fixedfirst.compute.looped_memory import LoopedShape, looped_shape, looped_training_memory
from fixedfirst.compute.memory import (
    MARGIN,
    Placement,
    TrainingMemory,
    deepest_depth,
    training_memory,
)
from fixedfirst.compute.plan import RunPlan, plan_costed_run
from fixedfirst.config import RunConfig, TransformersModelConfig
from fixedfirst.errors import UserError

REFERENCE_MFU = 0.509
"""The MFU a plan assumes at every depth until a first run has measured ours: nanochat's
depth-32 GPT (1.9B parameters, bf16, 8 x H100) logs 50.9% in the training output its run1000.sh
quotes (github.com/karpathy/nanochat). Another model, tuned for those GPUs: our step has not run
on a GPU, and a CPU's MFU (58.1%, docs/guides/benchmarks.md) says nothing about one."""
REFERENCE = (
    "nanochat's depth-32 GPT (1.9B parameters, bf16) on 8 x H100, its run1000.sh's training log "
    "(github.com/karpathy/nanochat); not our step's, which no GPU has measured yet: "
    "benchmarks/first_run.py measures it and `--measured DIR` reads its output"
)
FIRST_RUN_FILE = "first-run.json"
"""What benchmarks/first_run.py writes into its output folder."""

MAX_GPUS = 4096
"""The most GPUs the plan looks at when it searches for a number of them that fits."""


class CheckpointedCost(CostModel, Protocol):
    """A compute model that also says what activation checkpointing adds per token: ours
    (compute/flops.py) or a transformers architecture's counted from its shape (ShapeFlops)."""

    def recomputed(self, depth: int, grad_depth: int | None = None) -> float: ...


@dataclass(frozen=True)
class MfuByDepth:
    """Model FLOP utilisation against the GPU's datasheet peak at the training depths where it
    is known, and where it comes from; linear in between, held beyond the ends."""

    points: tuple[tuple[int, float], ...]
    """(depth, MFU), by depth; at least one."""
    source: str

    @classmethod
    def flat(cls, mfu: float, source: str) -> MfuByDepth:
        return cls(((1, mfu),), source)

    def at(self, depth: int) -> float:
        points = self.points
        if depth <= points[0][0]:
            return points[0][1]
        for (d0, m0), (d1, m1) in pairwise(points):
            if depth <= d1:
                return m0 + (m1 - m0) * (depth - d0) / (d1 - d0)
        return points[-1][1]

    def describe(self) -> str:
        if len(self.points) == 1:
            return f"MFU {self.points[0][1]:.3g} at every depth, from {self.source}"
        shown = ", ".join(f"K={d}: {m:.3g}" for d, m in self.points)
        return f"MFU by depth ({shown}; linear between), from {self.source}"


def measured_mfu(directory: str | Path, compiled: bool = True) -> MfuByDepth:
    """The MFU by depth that a first run measured (benchmarks/first_run.py's output folder): its
    compiled step where that section ran (and `compiled`), else its eager one, against the
    datasheet's peak."""
    path = Path(directory) / FIRST_RUN_FILE
    try:
        data = json.loads(path.read_text())
        environment, rows = data["environment"], data["speed"]["rows"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(
            f"--measured {directory}: no first run's output there ({path}: "
            f"{type(e).__name__}); give the folder benchmarks/first_run.py --out wrote"
        ) from None
    modes = {r["mode"] for r in rows if r["mfu"].get("datasheet")}
    mode = "compiled" if compiled and "compiled" in modes else "eager"
    points = sorted(
        (int(r["depth"]), float(r["mfu"]["datasheet"]))
        for r in rows
        if r["mode"] == mode and r["mfu"].get("datasheet")
    )
    if not points:
        raise UserError(
            f"--measured {directory}: its first run measured no step against a datasheet peak "
            f"(device {environment.get('device')!r}: a GPU the accelerator table knows)"
        )
    where = f"benchmarks/first_run.py on {environment['device']} ({path}, {mode})"
    return MfuByDepth(tuple(points), where)


@dataclass(frozen=True)
class Hardware:
    name: str
    gpus: int
    memory: int
    """Bytes per GPU."""
    peak_flops: float
    """Per GPU, in the run's precision."""
    mfu: MfuByDepth

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
class DepthShare:
    """The steps a run takes at one depth and what they cost on the plan's GPUs."""

    depth: int
    steps: float
    flops: float
    """Modeled training FLOPs of these steps (with checkpointing's recomputation when asked)."""
    mfu: float
    seconds: float


@dataclass(frozen=True)
class GpuPlan:
    config: RunConfig
    hardware: Hardware
    run: RunPlan[CheckpointedCost]
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
    depth_steps: dict[int, float]
    """How many steps the run takes at each depth (of the schedule it is costed on: an undecided
    auto switch at its floor)."""

    def by_depth(self, checkpoint: bool) -> list[DepthShare]:
        """Each depth's steps, FLOPs, MFU and seconds on `hardware.gpus` GPUs."""
        h, run, t = self.hardware, self.run, self.config.train
        shares = []
        for depth, steps in sorted(self.depth_steps.items()):
            flops = steps * run.step_flops(depth)
            if checkpoint:
                flops += steps * t.tokens_per_step * run.flop_model.recomputed(depth, t.grad_depth)
            mfu = h.mfu.at(depth)
            shares.append(
                DepthShare(depth, steps, flops, mfu, flops / (h.gpus * h.peak_flops * mfu))
            )
        return shares

    def seconds(self, checkpoint: bool) -> float:
        """The run's wall-clock: the sum over its depths."""
        return sum(share.seconds for share in self.by_depth(checkpoint))


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


def run_shape(config: RunConfig) -> LoopedShape:
    """A transformers run's model as the looped memory model sees it, with the run's adapters."""
    model = config.model
    assert isinstance(model, TransformersModelConfig)
    return looped_shape(model.architecture, model.options, config.train.lowrank)


def planned_run(config: RunConfig) -> RunPlan[CheckpointedCost]:
    """The run's plan under a compute model that counts checkpointing's recomputation: ours from
    its shape, a transformers architecture's from its shape too (no weights built; `train`
    measures torch's count instead, compute/run_cost.py)."""
    t = config.train
    cost: CheckpointedCost
    if isinstance(config.model, TransformersModelConfig):
        cost = ShapeFlops(run_shape(config), t.seq_len, t.lowrank is not None)
    else:
        cost = flop_model(config.own_model("the compute model of a model's shape"), t.seq_len)
    return plan_costed_run(config, cost)


def step_memory(
    config: RunConfig, where: Placement, micro: int, local: int, depth: int, checkpoint: bool
) -> TrainingMemory:
    """One GPU's memory of a step: the looped memory model for a transformers run
    (compute/looped_memory.py), our model's otherwise (compute/memory.py)."""
    t = config.train
    if isinstance(config.model, TransformersModelConfig):
        lowrank = t.lowrank is not None
        shape = run_shape(config)
        return looped_training_memory(
            shape, where, lowrank, micro, t.seq_len, depth, checkpoint, local // micro
        )
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
    run = planned_run(config)
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
    per_token = run.histogram().total(lambda k: run.flop_model.recomputed(k, t.grad_depth))
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
        depth_steps={k: n for k, n in run.histogram().steps().items() if n},
    )
