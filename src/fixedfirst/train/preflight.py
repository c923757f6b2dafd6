"""A run's pre-flight: everything that can refuse it, checked before its directory is touched.

`preflight(config)` resolves the configuration (the data kind's options written out), plans the
budget, picks the device and precision, checks that a step fits in memory, builds the batch source,
its validation batches and the probe of a `depth-gap` auto switch; any of them raises a one-line
`UserError`.
The `Preflight` it returns is what the trainer is built from, so a refused run leaves nothing
behind and a started one never rebuilds these pieces.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fixedfirst.compute.memory import Placement
from fixedfirst.compute.plan import RunPlan
from fixedfirst.compute.run_cost import run_plan
from fixedfirst.config import RunConfig
from fixedfirst.data.prepared import check_checkpoint_data
from fixedfirst.data.registry import build_source, resolve_data
from fixedfirst.data.source import Batch, BatchSource
from fixedfirst.errors import UserError
from fixedfirst.machine.device import (
    cuda_settings,
    given_peak_flops,
    resolve_device,
    resolve_dtype,
)
from fixedfirst.model.lowrank import require_peft
from fixedfirst.runs.identity import with_checkpoint_identity
from fixedfirst.train import compilation, distributed, memory_check
from fixedfirst.train.distributed import World
from fixedfirst.train.sinks import check_packages
from fixedfirst.train.switch_probe import DepthGapProbe


@dataclass
class Preflight:
    """A checked run, ready to start: its configuration, plan, placement, data and peak."""

    config: RunConfig
    """The configuration as the run directory stores it: the data kind's options complete."""
    world: World
    plan: RunPlan
    device: torch.device
    dtype: torch.dtype
    memory: Placement
    """Where the step's memory was estimated (device, bf16, strategy, processes)."""
    source: BatchSource
    val_batches: list[Batch]
    probe: DepthGapProbe | None
    """The probe of an auto switch by the `depth-gap` rule, None for every other schedule."""
    given_peak: float | None
    """FIXEDFIRST_PEAK_FLOPS, read with the run's other settings (None: measured later)."""


def preflight(config: RunConfig, world: World | None = None) -> Preflight:
    """Check `config` for a run on `world` (default: this process's, from torchrun's variables)."""
    # The data kind's options complete, as config.toml stores them (a later change of a default
    # cannot change a saved run); an unknown kind or option is refused here.
    config = resolve_data(config)
    # The checkpoint a run starts from, by the checksum of its weights (computed, or checked
    # against the one a resumed run recorded); a missing or truncated shard is refused here.
    if config.train.lowrank is not None:  # peft, or one line naming the extra
        require_peft()
    config = with_checkpoint_identity(config)
    world = world if world is not None else World.from_env()
    t = config.train
    plan = run_plan(config)
    device = distributed.process_device(world, resolve_device(t.device))
    cuda_settings(device)  # before anything is allocated there
    dtype = resolve_dtype(t.precision, device)
    memory = memory_check.placement(config, device, dtype, world)
    memory_check.check_training_memory(config, memory, plan)
    check_checkpoint_data(config)
    source = build_source(config)
    if source.vocab_size > config.model.vocab_size:
        raise UserError(
            f"model.vocab_size = {config.model.vocab_size} is smaller than the data's "
            f"vocabulary ({source.vocab_size}); set model.vocab_size >= {source.vocab_size}"
        )
    if not world.launched:  # under torchrun once per machine, by the trainer
        source.check_training_data()
    val_batches = source.validation_batches(config.eval.batches, t.micro_batch())
    probe = DepthGapProbe.for_run(config, plan.flop_model, source, dtype)
    check_packages(t.log_to)
    compilation.check_compiler(t.compile, device)
    given_peak = given_peak_flops()
    local, micro = t.batch_size // world.world_size, t.micro_batch(world.world_size)
    if t.batch_size % world.world_size or local % micro:
        raise UserError(
            f"train.batch_size = {t.batch_size} must split into {world.world_size} rank(s) of "
            f"whole micro-batches of {micro}"
        )
    return Preflight(
        config, world, plan, device, dtype, memory, source, val_batches, probe, given_peak
    )
