"""Validation NLL of a run's checkpoint at many serving depths, kept beside the run as JSON.

`fixedfirst eval` and the sweep report both measure through here, so one file format describes
every depth-wise evaluation (docs/design.md §17). An evaluation at depth 64 costs several
training steps, so the same question (same weights, depths, batches and draw seed) gets the
saved answer; anything else is measured afresh.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch

from fixedfirst.data.source import Batch
from fixedfirst.files import locks
from fixedfirst.files.paths import shown
from fixedfirst.files.writing import write_json_atomic
from fixedfirst.schedules import describe
from fixedfirst.train.checkpoint import MODEL_FILE
from fixedfirst.train.opening import (
    find_checkpoint,
    load_run,
    open_run,
    require_data,
    trained_source,
)

EVAL_FORMAT = "fixedfirst-eval"
EVAL_VERSION = 1


def eval_path(run: str | Path, step: int) -> Path:
    """Where the evaluation of `run` at checkpoint `step` is kept by default."""
    return Path(run) / f"eval-step-{step:07d}.json"


def evaluate_run(
    run: str | Path,
    depths: list[int],
    batches: int | None = None,
    step: int | None = None,
    device: str | torch.device = "cpu",
    validation_seed: int | None = None,
    *,
    data: str | None = None,
) -> dict[str, Any]:
    """Measure validation NLL of the checkpoint at `step` (default: the newest) at `depths`,
    over `batches` validation batches (default: the run's eval.batches): the held-out set's
    first rows, or those `validation_seed` draws (`BatchSource.validation_batches`); `data`:
    where the run's data is now, when it moved."""
    from fixedfirst.evaluation.nll import mean_serving_nll, validation_nll
    from fixedfirst.machine.device import resolve_dtype
    from fixedfirst.train.progress import Ticker

    require_data(open_run(run, data)[1], run, data)  # before the weights are read, verified
    loaded = load_run(run, step, device, data=data)
    config = loaded.config
    n_batches = batches or config.eval.batches
    batch_size = config.train.micro_batch()
    source = trained_source(config, loaded.checkpoint.meta.get("data"))
    val = source.validation_batches(n_batches, batch_size, validation_seed)
    device = next(loaded.model.parameters()).device
    dtype = resolve_dtype(config.train.precision, device)
    ticker = Ticker(f"eval {shown(run)} at depths up to {max(depths)}: batch")
    nll = validation_nll(loaded.model, val, depths, device, dtype, progress=ticker)
    scored = sum(b.scored_tokens for b in val)
    return {
        "format": EVAL_FORMAT,
        "version": EVAL_VERSION,
        "run": str(run),
        "schedule": describe(config.schedule),
        "step": loaded.checkpoint.step,
        "tokens": loaded.checkpoint.meta.get("tokens"),
        "weights_sha256": loaded.checkpoint.meta["files"][MODEL_FILE],
        "depths": list(depths),
        "batches": n_batches,
        "batch_size": batch_size,
        "scored_tokens": scored,
        "validation_seed": validation_seed,
        "sequences": sum(len(b.inputs) for b in val),
        "validation_sha256": batches_sha256(val),
        "nll_by_depth": {str(d): v for d, v in nll.items()},
        "mean_serving_nll": mean_serving_nll(nll),
    }


def batches_sha256(batches: list[Batch]) -> str:
    """A checksum of the rows scored: their inputs and targets, in order."""
    digest = hashlib.sha256()
    for batch in batches:
        for tensor in (batch.inputs, batch.targets):
            digest.update(tensor.to(torch.int64).contiguous().numpy().tobytes())
    return digest.hexdigest()


def read_eval(path: Path) -> dict[str, Any] | None:
    """A saved evaluation, or None when the file is missing or not one of ours."""
    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(result, dict) or result.get("format") != EVAL_FORMAT:
        return None
    if result.get("version") != EVAL_VERSION:
        return None
    return result


def write_eval(result: dict[str, Any], path: Path) -> None:
    """Write through a temporary file, so an interrupted write never leaves half a JSON."""
    write_json_atomic(path, result)


def cached_evaluation(
    run: str | Path,
    depths: list[int],
    batches: int | None = None,
    device: str | torch.device = "cpu",
    validation_seed: int | None = None,
) -> tuple[dict[str, Any], bool]:
    """The evaluation of the run's newest checkpoint, from its saved JSON when that measured the
    same weights at the same depths over the same batches (same draw seed); else measured now
    and saved.

    Returns (result, reused)."""
    config, ckpt = find_checkpoint(run)
    path = eval_path(run, ckpt.step)
    saved = read_eval(path)
    n_batches = batches or config.eval.batches
    if saved is not None and (
        saved.get("weights_sha256") == ckpt.meta["files"][MODEL_FILE]
        and saved.get("depths") == list(depths)
        and saved.get("batches") == n_batches
        and saved.get("batch_size") == config.train.micro_batch()
        and saved.get("validation_seed") == validation_seed
    ):
        return saved, True
    with locks.holding(run, "eval"):  # measured now and written into the run
        result = evaluate_run(run, depths, n_batches, ckpt.step, device, validation_seed)
        write_eval(result, path)
    return result, False
