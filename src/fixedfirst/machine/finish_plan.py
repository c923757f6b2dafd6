"""Planning a finish of a transformers looped model at its size, from its config.json alone.

A holder of a fixed-depth checkpoint asks what finishing it at depths 1..K would cost: for each
depth, the memory per GPU of a finishing step (compute/looped_memory.py) under FSDP2 over the
GPUs, full fine-tuning and low-rank adapters, with and without activation checkpointing, and
whether it fits in (1 - MARGIN) of a GPU; and the hours a billion tokens take at a stated MFU.
The FLOPs per token are counted from the shape (the matmuls of every layer application, the
experts a token visits, eager attention over all T keys, the head): the measured compute model
(compute/measured.py) would build the model, which at 26B parameters a planning machine cannot.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fixedfirst.compute.looped_flops import flops_per_token
from fixedfirst.compute.looped_memory import LoopedShape, looped_shape, looped_training_memory
from fixedfirst.compute.memory import Placement, TrainingMemory
from fixedfirst.config import LowRankConfig
from fixedfirst.errors import UserError
from fixedfirst.machine.planning import (
    GpuPlan,
    Hardware,
    local_batch,
    placement_on,
    run_shape,
)


@dataclass(frozen=True)
class FinishOption:
    depth: int
    lowrank: bool
    checkpoint: bool
    memory: TrainingMemory
    fits: bool
    hours_per_billion: float


@dataclass(frozen=True)
class FinishPlan:
    architecture: str
    shapes: dict[bool, LoopedShape]
    """By low-rank or not."""
    hardware: Hardware
    seq_len: int
    micro_batch: int
    options: list[FinishOption]


def model_options(path: str | Path) -> tuple[str, dict[str, Any]]:
    """The architecture and its configuration keys from a transformers config.json (a multimodal
    model's text configuration), the depth key and the library's own keys left out."""
    from fixedfirst.config.architectures import (
        architecture_fields,
        looped_architecture,
        model_class,
    )

    try:
        data = json.loads(Path(path).read_text())
        names = data["architectures"]
        if not isinstance(names, list) or not names:
            raise TypeError
    except OSError as e:
        raise UserError(
            f"--model-config {path}: cannot read it ({e.strerror or e}); give a transformers "
            "config.json"
        ) from None
    except (ValueError, KeyError, TypeError):
        raise UserError(
            f"--model-config {path}: not a transformers config.json (JSON with a list "
            "'architectures', e.g. [\"Inkling2LoopForCausalLM\"])"
        ) from None
    name = str(names[0]).replace("ForConditionalGeneration", "ForCausalLM")
    architecture = looped_architecture(name)
    text = data.get("text_config", data)
    if not isinstance(text, dict):
        raise UserError(f"--model-config {path}: its text_config is not a table of keys")
    loop = text.get("loop_config") or {}
    renamed = {
        "core_start": "loop_layer_index_start",
        "core_end": "loop_layer_index_end",
        "gate_rank": "loop_gate_rank",
    }
    keys = set(architecture_fields(model_class(architecture).config_class))
    options = {k: v for k, v in text.items() if k in keys and k != architecture.depth_key}
    options.update({renamed[k]: v for k, v in loop.items() if k in renamed})
    return name, options


@dataclass(frozen=True)
class Batching:
    """How each GPU runs its share of a step: `micro_steps` micro-batches of `micro_batch`
    sequences of `seq_len` tokens, their gradients accumulated."""

    seq_len: int
    micro_batch: int
    micro_steps: int = 1


def finish_option(
    shape: LoopedShape,
    lowrank: bool,
    where: Placement,
    hardware: Hardware,
    batching: Batching,
    depth: int,
    checkpoint: bool,
) -> FinishOption:
    """One row of a plan: a step's memory per GPU at `depth`, whether it fits, and the hours a
    billion tokens take at the hardware's MFU."""
    b = batching
    memory = looped_training_memory(
        shape, where, lowrank, b.micro_batch, b.seq_len, depth, checkpoint, b.micro_steps
    )
    flops = flops_per_token(shape, b.seq_len, depth, lowrank, checkpoint)
    rate = hardware.gpus * hardware.peak_flops * hardware.mfu.at(depth)
    hours = 1e9 * flops / rate / 3600
    return FinishOption(depth, lowrank, checkpoint, memory, memory.peak <= hardware.usable, hours)


def plan_finish(
    architecture: str,
    options: dict[str, Any],
    hardware: Hardware,
    seq_len: int,
    micro_batch: int,
    depths: list[int],
    lowrank: LowRankConfig,
) -> FinishPlan:
    shapes = {
        False: looped_shape(architecture, options, None),
        True: looped_shape(architecture, options, lowrank),
    }
    strategy = "fsdp" if hardware.gpus > 1 else "single"
    where = Placement("cuda", True, strategy, hardware.gpus)  # type: ignore[arg-type]
    batching = Batching(seq_len, micro_batch)
    rows = [
        finish_option(shapes[adapters], adapters, where, hardware, batching, depth, checkpoint)
        for depth in depths
        for adapters in (False, True)
        for checkpoint in (False, True)
    ]
    return FinishPlan(architecture, shapes, hardware, seq_len, micro_batch, rows)


def looped_rows(plan: GpuPlan) -> list[FinishOption]:
    """A transformers run's table: a step's memory per GPU and hours per billion tokens at each
    depth the schedule draws, as the run trains (its adapters or every weight, its strategy and
    micro-batches), checkpointing off and on."""
    config, h = plan.config, plan.hardware
    lowrank = config.train.lowrank is not None
    where = placement_on(config, plan.configured.strategy, h.gpus)
    local = local_batch(config, h.gpus)
    batching = Batching(config.train.seq_len, plan.micro_batch, local // plan.micro_batch)
    shape = run_shape(config)
    return [
        finish_option(shape, lowrank, where, h, batching, depth, checkpoint)
        for depth in sorted(plan.depth_steps)
        for checkpoint in (False, True)
    ]
