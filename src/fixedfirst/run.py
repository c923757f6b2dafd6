"""Open a finished (or running) training run for evaluation, generation or diagnosis."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from fixedfirst.config import RunConfig
from fixedfirst.errors import UserError
from fixedfirst.model import LoopedTransformer
from fixedfirst.train.checkpoint import Checkpoint, CheckpointManager
from fixedfirst.train.run_dir import RunDir


@dataclass
class LoadedRun:
    path: Path
    config: RunConfig
    model: LoopedTransformer
    checkpoint: Checkpoint


def find_checkpoint(run: str | Path, step: int | None = None) -> tuple[RunConfig, Checkpoint]:
    """The run's configuration and its checkpoint at `step` (default: the newest valid one)."""
    run_dir = RunDir(run)
    if not run_dir.path.is_dir():
        raise UserError(f"run directory {run_dir.path} does not exist")
    config = run_dir.saved_config()
    manager = CheckpointManager(run_dir.checkpoints_path)
    if step is None:
        ckpt = manager.latest_valid(warn=lambda line: print(line))
        if ckpt is None and manager.all():
            raise UserError(f"every checkpoint in {manager.directory} is corrupt")
        if ckpt is None:
            raise UserError(f"{run_dir.path} has no complete checkpoint yet")
    else:
        ckpt = manager.at_step(step)
        ckpt.verify()
    return config, ckpt


def load_run(
    run: str | Path, step: int | None = None, device: str | torch.device = "cpu"
) -> LoadedRun:
    """The run's model with the weights of a checkpoint, in eval mode on `device`."""
    config, ckpt = find_checkpoint(run, step)
    model = LoopedTransformer(config.model)
    ckpt.load_model(model)
    return LoadedRun(Path(run), config, model.to(device).eval(), ckpt)
