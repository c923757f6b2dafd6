"""Checks that a checkpoint fits the run resuming from it: the configuration it was trained with
(`runs/identity.py`), its trainer state (optimizer moments, data position).

Run on rank 0 before anything is broadcast, so that a checkpoint of another model, optimizer or
data is refused in one line, naming what does not fit, instead of failing inside
`load_state_dict` on every rank. `load_full_state` then loads it, the trainer's way, into the
trainer's model and the diagnostic's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from fixedfirst.config import RunConfig
from fixedfirst.data.source import BatchSource
from fixedfirst.errors import UserError
from fixedfirst.files.paths import shown
from fixedfirst.runs.checkpoint import Checkpoint
from fixedfirst.runs.identity import check_same_run, stored_config
from fixedfirst.train.parallel import ParallelModel


def check_same_config(ckpt: Checkpoint, config: RunConfig, run: Path) -> None:
    """Refuse a configuration that changes what defines the run the checkpoint is of (an
    edited config.toml included); checkpoints written before they stored it are not checked."""
    saved = stored_config(ckpt.meta, f"checkpoint {shown(ckpt.path)}")
    if saved is not None:
        check_same_run(saved, config, ckpt.path.name, shown(run))


def check_trainer_state(
    ckpt: Checkpoint,
    state: Any,
    source: BatchSource,
    parallel: ParallelModel,
    optimizer: torch.optim.Optimizer,
) -> None:
    """Refuse (on rank 0, before any broadcast) trainer state that does not fit this run: a
    low-rank run's adapters on other base weights included."""
    ckpt.check_base(parallel.base_identity)
    try:
        groups = [g["params"] for g in state["optimizer"]["param_groups"]]
        moments = state["optimizer"]["state"]
        data = state["data"]
    except (KeyError, TypeError) as e:
        raise UserError(f"checkpoint {ckpt.path}: trainer state does not fit ({e})") from None
    # The source refuses a position on other data (e.g. the data directory was prepared
    # again with another tokenizer); the trainer then sets the position on every rank.
    source.load_state_dict(data)
    if groups != parallel.optimizer_parameter_names(optimizer):
        raise UserError(
            f"checkpoint {ckpt.path}: trainer state does not fit (the optimizer's parameters "
            "differ from this model's)"
        )
    shapes = parallel.parameter_shapes()
    if not isinstance(moments, dict) or not set(moments) <= set(shapes):
        raise UserError(
            f"checkpoint {ckpt.path}: trainer state does not fit (optimizer state for "
            "parameters this model does not have)"
        )
    for name, values in moments.items():
        for key, value in values.items():
            if torch.is_tensor(value) and value.dim() and tuple(value.shape) != shapes[name]:
                raise UserError(
                    f"checkpoint {ckpt.path}: trainer state does not fit (optimizer {key} of "
                    f"{name} is {list(value.shape)}, the parameter {list(shapes[name])})"
                )


def load_full_state(
    ckpt: Checkpoint,
    parallel: ParallelModel,
    optimizer: torch.optim.Optimizer,
    weights: dict[str, torch.Tensor],
    optimizer_state: dict[str, Any],
) -> None:
    """Load `ckpt`'s full weights and optimizer state (rank 0's; empty elsewhere) on every rank
    (`ParallelModel.load_full_state`); state that does not fit is refused in one line."""
    try:
        parallel.load_full_state(optimizer, weights, optimizer_state)
    except (KeyError, ValueError, RuntimeError, TypeError) as e:
        raise UserError(f"checkpoint {ckpt.path}: state does not fit ({e})") from None
