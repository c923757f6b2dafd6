"""Validation NLL of a run's checkpoint at many serving depths, kept beside the run as JSON.

`fixedfirst eval` and the sweep report both measure through here, so one file format describes
every depth-wise evaluation (docs/reference/files.md). `HeldOut` says which rows are scored and how,
so that runs of different batch sizes can score the same rows. An evaluation at depth 64 costs
several training steps, so the same question (same weights, depths, rows and precision) gets the
saved answer; anything else is measured afresh.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from fixedfirst.data.source import Batch
from fixedfirst.errors import UserError
from fixedfirst.files import locks
from fixedfirst.files.paths import shown
from fixedfirst.files.writing import write_json_atomic
from fixedfirst.runs.checkpoint import MODEL_FILE
from fixedfirst.runs.opening import (
    find_checkpoint,
    load_any_run,
    open_run,
    require_data,
    trained_source,
)
from fixedfirst.schedules import describe

EVAL_FORMAT = "fixedfirst-eval"
EVAL_VERSION = 1
ROWS_BATCH = 64
"""Rows per forward when `HeldOut.rows` fixes the rows scored."""


@dataclass(frozen=True)
class HeldOut:
    """Which held-out rows a checkpoint is scored on, and in which precision."""

    batches: int | None = None
    """Batches of the run's micro-batch size (None: its eval.batches); unused with `rows`."""
    rows: int | None = None
    """Exactly this many rows, in batches of ROWS_BATCH, whatever the run's batch size."""
    seed: int | None = None
    """None: the split's first rows; S: rows drawn from the whole split by S."""
    precision: Literal["run", "fp32"] = "run"
    """The run's training precision (bf16 autocast where it trained so), or fp32."""

    def __post_init__(self) -> None:
        if self.rows is not None and self.rows < 1:
            raise ValueError(f"rows must be >= 1, got {self.rows}")


def eval_path(run: str | Path, step: int) -> Path:
    """Where the evaluation of `run` at checkpoint `step` is kept by default."""
    return Path(run) / f"eval-step-{step:07d}.json"


def evaluate_run(
    run: str | Path,
    depths: list[int],
    held_out: HeldOut = HeldOut(),
    step: int | None = None,
    device: str | torch.device = "cpu",
    *,
    data: str | None = None,
) -> dict[str, Any]:
    """Measure validation NLL of the checkpoint at `step` (default: the newest) at `depths`, on
    the rows `held_out` names; `data`: where the run's data is now, when it moved."""
    from fixedfirst.evaluation.nll import mean_serving_nll, score_held_out
    from fixedfirst.machine.device import resolve_dtype
    from fixedfirst.progress import Ticker

    require_data(open_run(run, data)[1], run, data)  # before the weights are read, verified
    loaded = load_any_run(run, step, device, data=data)
    config = loaded.config
    if held_out.rows is not None:
        batch_size = min(ROWS_BATCH, held_out.rows)
        n_batches = -(-held_out.rows // batch_size)
    else:
        n_batches, batch_size = held_out.batches or config.eval.batches, config.train.micro_batch()
    source = trained_source(config, loaded.checkpoint.meta.get("data"))
    val = source.validation_batches(n_batches, batch_size, held_out.seed)
    if held_out.rows is not None:
        val = _first_rows(val, held_out.rows)
    device = next(loaded.model.parameters()).device
    trained_in = resolve_dtype(config.train.precision, device)
    dtype = torch.float32 if held_out.precision == "fp32" else trained_in
    ticker = Ticker(f"eval {shown(run)} at depths up to {max(depths)}: batch")
    scores = score_held_out(loaded.model, val, depths, device, dtype, ticker, rows=True)
    scored = sum(b.scored_tokens for b in val)
    return {
        "format": EVAL_FORMAT,
        "version": EVAL_VERSION,
        "run": str(run),
        "schedule": describe(config.schedule),
        "data": source.describe(),
        "step": loaded.checkpoint.step,
        "tokens": loaded.checkpoint.meta.get("tokens"),
        "weights_sha256": loaded.checkpoint.meta["files"][MODEL_FILE],
        "depths": list(depths),
        "batches": n_batches,
        "batch_size": batch_size,
        "rows": held_out.rows,
        "scored_tokens": scored,
        "validation_seed": held_out.seed,
        "sequences": sum(len(b.inputs) for b in val),
        "validation_sha256": batches_sha256(val),
        "precision": "bf16" if dtype == torch.bfloat16 else "fp32",
        "nll_by_depth": {str(d): v for d, v in scores.nll.items()},
        "mean_serving_nll": mean_serving_nll(scores.nll),
        "row_nll": {str(d): [round(v, 6) for v in scores.row_nll[d]] for d in depths},
    }


def _first_rows(batches: list[Batch], rows: int) -> list[Batch]:
    """The batches cut to their first `rows` rows in all."""
    out, left = [], rows
    for batch in batches:
        if left <= 0:
            break
        out.append(Batch(batch.inputs[:left], batch.targets[:left]))
        left -= len(batch.inputs)
    return out


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


def check_kept_eval(
    run: str | Path, depths: list[int], step: int | None, data: str | None = None
) -> None:
    """Refuse, before measuring, an evaluation of `run` that would replace its saved evaluation
    at other depths (`fixedfirst eval` twice at other depths silently kept only the second)."""
    if not list(Path(run).glob("eval-step-*.json")):
        return
    path = eval_path(run, find_checkpoint(run, step, data=data)[1].step)
    saved = read_eval(path)
    kept = [int(d) for d in (saved or {}).get("nll_by_depth", {})]
    if saved is not None and sorted(kept) != sorted(set(depths)):
        raise UserError(
            f"{path} holds the evaluation at depths {','.join(map(str, kept))}; this one at "
            f"{','.join(map(str, depths))} would replace it: give --out FILE to keep both, or "
            "--force to replace it"
        )


def write_eval(result: dict[str, Any], path: Path) -> None:
    """Write through a temporary file, so an interrupted write never leaves half a JSON."""
    write_json_atomic(path, result)


def cached_evaluation(
    run: str | Path,
    depths: list[int],
    held_out: HeldOut = HeldOut(),
    device: str | torch.device = "cpu",
) -> tuple[dict[str, Any], bool]:
    """The evaluation of the run's newest checkpoint, from its saved JSON when that measured the
    same weights at the same depths on the same rows in the same precision; else measured now
    and saved.

    Returns (result, reused)."""
    from fixedfirst.machine.device import resolve_dtype

    config, ckpt = find_checkpoint(run)
    path = eval_path(run, ckpt.step)
    saved = read_eval(path)
    if held_out.rows is not None:
        rows = {"rows": held_out.rows, "batch_size": min(ROWS_BATCH, held_out.rows)}
    else:
        rows = {
            "batches": held_out.batches or config.eval.batches,
            "batch_size": config.train.micro_batch(),
        }
    run_precision = resolve_dtype(config.train.precision, torch.device(device)) == torch.bfloat16
    precision = "bf16" if held_out.precision == "run" and run_precision else "fp32"
    if saved is not None and (
        saved.get("weights_sha256") == ckpt.meta["files"][MODEL_FILE]
        and saved.get("depths") == list(depths)
        and all(saved.get(key) == value for key, value in rows.items())
        and saved.get("rows") == held_out.rows
        and saved.get("validation_seed") == held_out.seed
        and saved.get("precision", "bf16" if run_precision else "fp32") == precision
    ):
        return saved, True
    with locks.holding(run, "eval"):  # measured now and written into the run
        result = evaluate_run(run, depths, held_out, ckpt.step, device)
        write_eval(result, path)
    return result, False
