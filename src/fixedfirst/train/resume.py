"""Checks that a checkpoint's trainer state (optimizer moments, data position) fits this run.

Run on rank 0 before anything is broadcast, so that a checkpoint of another model, optimizer or
data is refused in one line, naming what does not fit, instead of failing inside
`load_state_dict` on every rank.
"""

from __future__ import annotations

from typing import Any

import torch

from fixedfirst.data.source import BatchSource
from fixedfirst.errors import UserError
from fixedfirst.train.checkpoint import Checkpoint
from fixedfirst.train.parallel import ParallelModel


def check_trainer_state(
    ckpt: Checkpoint,
    state: Any,
    source: BatchSource,
    parallel: ParallelModel,
    optimizer: torch.optim.Optimizer,
) -> None:
    """Refuse (on rank 0, before any broadcast) trainer state that does not fit this run."""
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
