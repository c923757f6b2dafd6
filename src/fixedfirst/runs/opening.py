"""Open a finished (or running) training run for evaluation, generation or diagnosis.

The one way every command reads a run: its saved configuration, a checkpoint chosen by step, tag
or recency and verified against its checksums, the model with that checkpoint's weights, and the
data source those weights trained on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Generic, TypeVar

import torch

from fixedfirst.config import RunConfig
from fixedfirst.data.registry import build_source
from fixedfirst.data.source import BatchSource
from fixedfirst.errors import UserError
from fixedfirst.files.paths import absolute, shown
from fixedfirst.model import LoopedLM, LoopedTransformer
from fixedfirst.model.kinds import LoopedModel, build_model, build_run_model
from fixedfirst.model.memory import check_fits
from fixedfirst.runs.checkpoint import Checkpoint, CheckpointManager, warn
from fixedfirst.runs.directory import RunDir

ModelT = TypeVar("ModelT", bound=LoopedLM)


@dataclass
class LoadedRun(Generic[ModelT]):
    path: Path
    config: RunConfig
    model: ModelT
    checkpoint: Checkpoint


def open_run(
    run: str | Path, data: str | None = None
) -> tuple[RunDir, RunConfig, CheckpointManager]:
    """A run directory's saved configuration and its checkpoints; refuses what is not a run.
    `data` (--data) is where the run's data is now, when it moved from its stored data.path."""
    run_dir = RunDir(run)
    if not run_dir.path.is_dir():
        raise UserError(f"run directory {run_dir.path} does not exist")
    config = run_dir.saved_config()
    if data is not None:
        if not data.strip():
            raise UserError("--data is empty; name the data directory")
        config = replace(config, data=replace(config.data, path=absolute(data)))
    return run_dir, config, CheckpointManager(run_dir.checkpoints_path)


def require_data(config: RunConfig, run: str | Path, data: str | None = None) -> None:
    """Refuse, before anything is loaded, a run whose data is not where it says (or where
    --data `data` says)."""
    path = config.data.path
    if path is None or Path(path).exists():
        return
    if data is not None:
        raise UserError(f"--data {shown(data)}: no such data directory")
    raise UserError(
        f"the data of {shown(run)} is not at {shown(path)} (its data.path) any more: pass "
        f"--data PATH where it is now, or prepare it there again"
    )


def trained_source(config: RunConfig, data_state: dict[str, Any] | None) -> BatchSource:
    """The run's data source, at the data its weights trained on: `data_state` (a checkpoint's
    meta "data", None for none) refuses other data than that (another tokenizer, other shards)."""
    source = build_source(config)
    if data_state is not None:
        source.load_state_dict(data_state)
    return source


def find_checkpoint(
    run: str | Path, step: int | None = None, tag: str | None = None, data: str | None = None
) -> tuple[RunConfig, Checkpoint]:
    """The run's configuration and a verified checkpoint: the one at `step`, or the newest
    tagged `tag`, or (neither given) the newest valid one."""
    run_dir, config, manager = open_run(run, data)
    if tag is not None:
        found = manager.with_tag(tag)
        if found is None:
            tags = sorted({t for c in manager.all() for t in c.tags}) or ["none"]
            raise UserError(
                f"{run_dir.path} has no checkpoint tagged '{tag}' (tags: {', '.join(tags)})"
            )
        ckpt = found
        ckpt.verify()
    elif step is None:
        latest = manager.latest_valid()  # warns on stderr about each corrupt one it skips
        if latest is None and manager.all():
            raise UserError(f"every checkpoint in {manager.directory} is corrupt")
        if latest is None:
            raise UserError(f"{run_dir.path} has no complete checkpoint yet")
        ckpt = latest
        for path in manager.incomplete():
            if path.name > f"step-{ckpt.step:07d}":
                warn(
                    f"warning: checkpoint {path} is incomplete (no valid meta.json) and is "
                    f"skipped; using step {ckpt.step}"
                )
    else:
        ckpt = manager.at_step(step)
        ckpt.verify()
    return config, ckpt


def load_run(
    run: str | Path,
    step: int | None = None,
    device: str | torch.device = "cpu",
    data: str | None = None,
) -> LoadedRun[LoopedTransformer]:
    """The run's model with the weights of a checkpoint, in eval mode on `device`: a run of
    fixedfirst's own looped transformer (what serving, export, inspection and the task metrics
    use); a run of a transformers architecture is refused in one line."""
    model_config = open_run(run, data)[1].own_model("this command")  # before a checkpoint
    config, ckpt = find_checkpoint(run, step, data=data)
    check_fits(model_config, torch.device("cpu"))  # built on the CPU first
    model = LoopedTransformer(model_config)
    ckpt.load_model(model)
    return LoadedRun(Path(run), config, model.to(device).eval(), ckpt)


def load_any_run(
    run: str | Path,
    step: int | None = None,
    device: str | torch.device = "cpu",
    data: str | None = None,
) -> LoadedRun[LoopedModel]:
    """`load_run` for a run of any model its [model] names (model/kinds.py), as evaluation by
    depth scores it and serving decodes it."""
    config, ckpt = find_checkpoint(run, step, data=data)
    # On the CPU; its trained weights are replaced. A full run's checkpoint holds every weight,
    # so its shape will do (a run from a checkpoint directory reads without it); a low-rank
    # run's frozen base is rebuilt as the run built it, and checked against the checkpoint.
    with torch.random.fork_rng(devices=[]):  # the caller's random state is left as it was
        if config.train.lowrank is None:
            model = build_model(config.model)
        else:
            model = build_run_model(config)
    ckpt.load_model(model)
    return LoadedRun(Path(run), config, model.to(device).eval(), ckpt)
