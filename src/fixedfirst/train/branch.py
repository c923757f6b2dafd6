"""A new run from another run's checkpoint, with changed settings (`fixedfirst branch`).

A resume continues the same run and refuses a change of what defines it (`runs/identity.py`): an
edited config.toml would otherwise train part of a run one way and part another, under one
summary. To go on from a checkpoint with another learning rate, budget or schedule, branch: the
checkpoint (weights, optimizer state, data position, counters) and the metrics up to it are
copied into a new run directory whose config.toml is the changed configuration, and
`fixedfirst train --resume --out NEW` trains it on, on any number of processes. The source run
is not touched.

From the branch step on the new configuration applies as if it had always been the run's: a new
budget re-plans the run (the learning rate and the switch at step t are those of the new number
of steps, so the learning rate may jump at the branch), a new schedule draws its depths there.
The model and the data stay (the weights and the data position carry over). A run with an auto
switch does not branch: its decision reads the losses of the whole run.
"""

from __future__ import annotations

from dataclasses import dataclass

from fixedfirst.compute.run_cost import run_plan
from fixedfirst.config import RunConfig
from fixedfirst.errors import UserError
from fixedfirst.files import locks
from fixedfirst.files.paths import absolute, shown
from fixedfirst.files.writing import write_error
from fixedfirst.runs.checkpoint import MODEL_FILE, Checkpoint, CheckpointManager
from fixedfirst.runs.directory import RunDir, stored
from fixedfirst.runs.identity import (
    CONFIG_KEY,
    describe_differences,
    run_defining_differences,
    stored_config,
)

BRANCH_TAG = "branch"


@dataclass
class Branch:
    checkpoint: Checkpoint
    """The copy in the new run."""
    changes: str
    """The keys that differ from the source run, with both values ('' when none)."""


def source_checkpoint(source: RunDir, step: int | None) -> Checkpoint:
    """The verified checkpoint at `step` of `source`, or its newest valid one."""
    manager = CheckpointManager(source.checkpoints_path)
    if step is not None:
        ckpt = manager.at_step(step)
        ckpt.verify()
        return ckpt
    newest = manager.latest_valid()
    if newest is None:
        raise UserError(f"{shown(source.path)} has no complete checkpoint to branch from")
    return newest


def branch_run(
    source: RunDir, out: RunDir, config: RunConfig, step: int | None, force: bool = False
) -> Branch:
    """Copy `source`'s checkpoint at `step` (default: the newest) into the new run `out`, whose
    configuration is `config`."""
    ckpt = source_checkpoint(source, step)
    before = stored_config(ckpt.meta, f"checkpoint {shown(ckpt.path)}") or source.saved_config()
    kept = [
        k for k in run_defining_differences(before, config) if k.startswith(("model.", "data."))
    ]
    if kept:
        raise UserError(
            f"a branch keeps the model and the data (the weights and the data position carry "
            f"over), but this one changes {', '.join(kept)}; train a new run instead"
        )
    if before.schedule.auto_switch or config.schedule.auto_switch:
        raise UserError(
            "a run with schedule.switch = 'auto' does not branch (its decision reads the whole "
            "run's losses); train a new run instead"
        )
    total = run_plan(config).total_steps
    if ckpt.step >= total:
        raise UserError(
            f"the branch point, step {ckpt.step}, is not before the end of the new run "
            f"({total} steps); raise train.tokens (or train.flops)"
        )
    out.check_new(force)
    locks.acquire(out.path, "branch")
    try:
        out.check_writable_layout()
        meta = {
            **ckpt.meta,
            CONFIG_KEY: stored(config).to_dict(),
            "total_steps": total,
            BRANCH_TAG: {
                "run": absolute(str(source.path)),
                "step": ckpt.step,
                "weights_sha256": ckpt.meta["files"][MODEL_FILE],
            },
        }
        copy = CheckpointManager(out.checkpoints_path).copy_in(ckpt, meta, [BRANCH_TAG])
        try:
            with open(source.metrics_path, "rb") as f:
                history = f.read(int(ckpt.meta["metrics_bytes"]))
        except OSError:
            history = b""
        try:
            out.metrics_path.write_bytes(history)
        except OSError as e:
            raise write_error(out.metrics_path, e) from None
        out.write_config(config)
    finally:
        locks.release(out.path)
    changes = (
        describe_differences(before, config) if run_defining_differences(before, config) else ""
    )
    return Branch(copy, changes)
