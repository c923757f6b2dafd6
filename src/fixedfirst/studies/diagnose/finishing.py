"""A run's state at a checkpoint, continued step by step exactly as its trainer would.

The diagnostic measures update pairs at the states the run itself passed through: the switch
checkpoint and u = 1, 2, 4, ... finishing updates later. `open_run_state` loads everything a step
depends on from a checkpoint: weights, AdamW moments (loaded the way the trainer resumes) and the
data position. `FinishingChain.advance` then takes the run's next step with the run's own depth
(the schedule is a pure function of seed and step), learning rate, batch and per-row
initial-state seeds (a pure function of seed, step and row), using the trainer's step
(`fixedfirst.train.step.train_step`), so after u steps the weights equal those the trainer wrote
at step switch + u. Nothing here reads or moves the global RNG.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from fixedfirst.config import RunConfig
from fixedfirst.data.registry import build_source
from fixedfirst.data.source import Batch, BatchSource
from fixedfirst.errors import UserError
from fixedfirst.machine.device import resolve_device, resolve_dtype
from fixedfirst.model import LoopedTransformer
from fixedfirst.runs.checkpoint import SWITCH_TAG, TRAINER_FILE, Checkpoint
from fixedfirst.runs.opening import find_checkpoint, open_run, require_data
from fixedfirst.schedules import Schedule, describe
from fixedfirst.train.auto_switch import checkpoint_schedule
from fixedfirst.train.distributed import World
from fixedfirst.train.optim import build_optimizer, lr_at
from fixedfirst.train.parallel import ParallelModel
from fixedfirst.train.resume import load_full_state
from fixedfirst.train.step import StepContext, state_seeds, train_step

HOW_TO_GET_A_SWITCH_CHECKPOINT = (
    'train a fixed-first run (schedule.kind = "fixed-first", e.g. `fixedfirst train CONFIG.toml '
    "--set schedule.kind=fixed-first --out NEWRUN`): the trainer saves the checkpoint tagged "
    f"'{SWITCH_TAG}' at the switch step automatically"
)


def find_diagnosis_checkpoint(
    run: str | Path, which: str = SWITCH_TAG, data: str | None = None
) -> tuple[RunConfig, Checkpoint]:
    """The run's configuration and the checkpoint named by `which`: a tag (default the switch
    point) or a step number; `data`: where the run's data is now, when it moved. Every refusal
    says what to do instead."""
    run_dir, config, manager = open_run(run, data)
    require_data(config, run, data)
    if which == SWITCH_TAG and manager.with_tag(SWITCH_TAG) is None:
        schedule = describe(config.schedule)
        if config.schedule.kind != "fixed-first":
            raise UserError(
                f"{run_dir.path} was trained with the '{schedule}' schedule, which has no "
                f"switch point, so it has no '{SWITCH_TAG}' checkpoint; "
                + HOW_TO_GET_A_SWITCH_CHECKPOINT
                + " (or pass --checkpoint STEP to diagnose another checkpoint)"
            )
        raise UserError(
            f"{run_dir.path} has no checkpoint tagged '{SWITCH_TAG}' yet (the run has not "
            f"reached its switch step); continue it with `fixedfirst train --resume --out "
            f"{run_dir.path}`"
        )
    if which.isdigit():
        config, ckpt = find_checkpoint(run, step=int(which), data=data)
    else:
        try:
            config, ckpt = find_checkpoint(run, tag=which, data=data)
        except UserError as e:
            raise UserError(f"{e}; pass a tag or a step number") from None
    if TRAINER_FILE not in ckpt.meta.get("files", {}):
        raise UserError(
            f"checkpoint {ckpt.path} holds weights only, no optimizer state ({TRAINER_FILE}); "
            "the diagnostic needs the AdamW moments of the run: use a checkpoint written by "
            "`fixedfirst train`"
        )
    return config, ckpt


@dataclass
class RunState:
    """A run's model, optimizer and data position as of one checkpoint, live in memory."""

    path: Path
    config: RunConfig
    checkpoint: Checkpoint
    total_steps: int
    model: LoopedTransformer
    optimizer: torch.optim.Optimizer
    source: BatchSource
    schedule: Schedule
    device: torch.device
    dtype: torch.dtype

    @property
    def step(self) -> int:
        return self.checkpoint.step

    @property
    def remaining_steps(self) -> int:
        return self.total_steps - self.step


def open_run_state(
    run: str | Path, which: str = SWITCH_TAG, device: str = "auto", data: str | None = None
) -> RunState:
    """Load the checkpoint `which` of `run` into a live model, optimizer and data source."""
    config, ckpt = find_diagnosis_checkpoint(run, which, data)
    dev = resolve_device(device)
    dtype = resolve_dtype(config.train.precision, dev)
    model = LoopedTransformer(config.own_model("fixedfirst diagnose")).to(dev)
    optimizer = build_optimizer(model, config.train)
    state = ckpt.load_trainer_state()
    optimizer_state = state.get("optimizer") if isinstance(state, dict) else None
    if not optimizer_state or (ckpt.step > 0 and not optimizer_state.get("state")):
        raise UserError(
            f"checkpoint {ckpt.path} has no optimizer state; the diagnostic needs the AdamW "
            "moments of the run: use a checkpoint written by `fixedfirst train`"
        )
    # Loaded the way the trainer resumes (full state dicts keyed by parameter name), on one
    # process whatever number of processes wrote the checkpoint.
    parallel = ParallelModel(model, World(), config.train.strategy, dev, dtype)
    weights = ckpt.load_weights(parallel.parameter_shapes())
    source = build_source(config)
    load_full_state(ckpt, parallel, optimizer, weights, optimizer_state)
    try:
        source.load_state_dict(state["data"])
    except (KeyError, ValueError, RuntimeError, TypeError) as e:
        raise UserError(f"checkpoint {ckpt.path}: trainer state does not fit ({e})") from None
    if "total_steps" not in ckpt.meta:
        raise UserError(f"checkpoint {ckpt.path}: meta.json lacks total_steps")
    return RunState(
        Path(run),
        config,
        ckpt,
        int(ckpt.meta["total_steps"]),
        model,
        optimizer,
        source,
        checkpoint_schedule(config, ckpt.meta),
        dev,
        dtype,
    )


@dataclass
class ChainStep:
    step: int
    depth: int
    lr: float
    loss: float


class FinishingChain:
    """Continues a `RunState` one trainer step at a time (with batches the caller drew, in the
    run's order, from `state.source`)."""

    def __init__(self, state: RunState) -> None:
        self.state = state
        self.step = state.step
        self.history: list[ChainStep] = []

    def lr(self, step: int) -> float:
        return lr_at(step, self.state.total_steps, self.state.config.train)

    def advance(self, batch: Batch) -> ChainStep:
        s, train = self.state, self.state.config.train
        if self.step >= s.total_steps:
            raise UserError(f"the run ends at step {s.total_steps}; no step is left to take")
        depth = s.schedule.depth(self.step, s.total_steps)
        lr = self.lr(self.step)
        seeds = state_seeds(train.seed, self.step, range(batch.inputs.shape[0]))
        context = StepContext(ParallelModel.alone(s.model), s.optimizer, train, s.dtype)
        loss, _ = train_step(context, batch.to(s.device), depth, lr, seeds)
        record = ChainStep(self.step, depth, lr, float(loss))
        self.history.append(record)
        self.step += 1
        return record
