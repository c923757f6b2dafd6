"""A loss that became NaN or infinite: the one-line error that says what is left and what to do."""

from __future__ import annotations

from fixedfirst.errors import UserError
from fixedfirst.train.checkpoint import CheckpointManager


class TrainingDiverged(UserError):
    """The loss became NaN or infinite."""


def diverged(loss: float, step: int, depth: int, checkpoints: CheckpointManager) -> UserError:
    """The error for a non-finite loss at (1-based) `step`: which checkpoint survives, and how to
    train on without the divergence."""
    saved = checkpoints.all()
    then = (
        f"the last good checkpoint (step {saved[-1].step}) is kept in {checkpoints.directory}; "
        "lower train.lr or raise train.warmup, then start a new run with another --out"
        if saved
        else "no checkpoint was saved yet; lower train.lr or raise train.warmup and start again "
        "with the same --out"
    )
    return TrainingDiverged(f"loss became {loss} at step {step} (depth {depth}); {then}")
