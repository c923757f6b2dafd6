"""Validation NLL of a run's checkpoint (or of a checkpoint directory someone else trained) at
many serving depths, kept beside the run as JSON.

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
    base: bool = False,
) -> dict[str, Any]:
    """Measure validation NLL of the checkpoint at `step` (default: the newest) at `depths`, on
    the rows `held_out` names, each with its interval over them (evaluation/profile.py);
    `data`: where the run's data is now, when it moved; `base`: for a run that started from a
    checkpoint directory, score that checkpoint too, on the same rows ("before")."""
    from fixedfirst.evaluation.nll import mean_serving_nll, score_held_out
    from fixedfirst.evaluation.profile import base_profile, checkpoint_record, profile
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
    before = None
    if base and config.model.checkpoint is not None:
        loaded.model.cpu()  # the checkpoint's model takes its place on the device
        before = base_profile(config, val, depths, device, dtype, scores)
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
        **profile(scores, depths),
        "mean_serving_nll": mean_serving_nll(scores.nll),
        "row_tokens": scores.row_tokens,
        "checkpoint": checkpoint_record(config.model),
        "base": before,
    }


CHECKPOINT_SEQ_LEN = 1024
"""The block length a checkpoint is scored at by default (shorter when the model takes less)."""


def evaluate_checkpoint(
    directory: str | Path,
    data: str,
    depths: list[int],
    blocks: int,
    seq_len: int | None = None,
    device: str | torch.device = "cpu",
) -> dict[str, Any]:
    """The profile of a checkpoint directory at `depths`: NLL on the first `blocks` rows of
    `seq_len` tokens (default: CHECKPOINT_SEQ_LEN or the longest the model takes) of the
    validation split of `data`, which must be text in the checkpoint's own tokens."""
    from fixedfirst.config import DataConfig, RunConfig, TrainConfig
    from fixedfirst.config.run import model_section
    from fixedfirst.data.prepared import check_checkpoint_data
    from fixedfirst.data.registry import build_source
    from fixedfirst.errors import UserError
    from fixedfirst.evaluation.nll import mean_serving_nll, score_held_out
    from fixedfirst.evaluation.profile import checkpoint_record, profile
    from fixedfirst.machine.device import resolve_dtype
    from fixedfirst.model.kinds import initial_model
    from fixedfirst.progress import Ticker
    from fixedfirst.runs.identity import with_checkpoint_identity

    if blocks < 2:
        raise UserError(f"--blocks must be >= 2 (an interval needs two blocks), got {blocks}")
    section = model_section({"checkpoint": str(directory)})
    length = seq_len or min(CHECKPOINT_SEQ_LEN, section.max_seq_len)
    if not 2 <= length <= section.max_seq_len:
        raise UserError(
            f"--seq-len {length}: must be in 2..{section.max_seq_len} (the longest sequence "
            "the model takes)"
        )
    train = TrainConfig(seq_len=length, batch_size=min(ROWS_BATCH, blocks))
    config = RunConfig(model=section, train=train, data=DataConfig(kind="tokens", path=data))
    config = with_checkpoint_identity(config)
    check_checkpoint_data(config)
    source = build_source(config)
    batch_size = train.batch_size
    val = _first_rows(source.validation_batches(-(-blocks // batch_size), batch_size), blocks)
    model = initial_model(config.model).to(device)
    device = next(model.parameters()).device
    dtype = resolve_dtype("auto", device)
    ticker = Ticker(f"eval {shown(directory)} at depths up to {max(depths)}: batch")
    scores = score_held_out(model, val, depths, device, dtype, ticker, rows=True)
    return {
        "format": EVAL_FORMAT,
        "version": EVAL_VERSION,
        "run": None,
        "schedule": None,
        "data": source.describe(),
        "step": None,
        "tokens": None,
        "weights_sha256": config.model.checkpoint_sha256,
        "depths": list(depths),
        "batches": len(val),
        "batch_size": batch_size,
        "rows": blocks,
        "seq_len": length,
        "scored_tokens": sum(b.scored_tokens for b in val),
        "validation_seed": None,
        "sequences": sum(len(b.inputs) for b in val),
        "validation_sha256": batches_sha256(val),
        "precision": "bf16" if dtype == torch.bfloat16 else "fp32",
        **profile(scores, depths),
        "mean_serving_nll": mean_serving_nll(scores.nll),
        "row_tokens": scores.row_tokens,
        "checkpoint": checkpoint_record(config.model),
        "base": None,
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


def write_eval(
    result: dict[str, Any], path: Path, replace: bool = False
) -> tuple[dict[str, Any], str]:
    """Save `result` at `path` (through a temporary file, so an interrupted write never leaves
    half a JSON), joined with the evaluation saved there when it asked the same question at
    other depths (`profile.merged`): what was written, and a line saying what became of the
    file that was there. An evaluation of another question (other weights, rows or precision)
    at depths `result` lacks is replaced only with `replace` (`--force`): refused otherwise,
    so that `fixedfirst eval` at other depths never loses the depths measured before."""
    from fixedfirst.evaluation.profile import merged

    saved = read_eval(path) if path.is_file() else None
    joined = merged(saved, result)
    if joined is not None:
        kept = other_depths(saved, result)
        how = f"kept its depths {', '.join(map(str, kept))}" if kept else "same depths"
        write_json_atomic(path, joined)
        return joined, f"wrote {shown(path)} (joined with the evaluation there: {how})"
    lost = other_depths(saved, result)
    if lost and not replace:
        raise UserError(
            f"{shown(path)} holds the evaluation at depths {','.join(map(str, lost))} of other "
            f"weights, rows or precision, which this one at "
            f"{','.join(map(str, result['depths']))} would replace: give --out FILE to keep "
            "both, or --force to replace it"
        )
    write_json_atomic(path, result)
    if saved is not None:
        return result, (
            f"wrote {shown(path)}, replacing an evaluation of other weights, rows or precision"
        )
    return result, f"wrote {shown(path)}"


def other_depths(saved: dict[str, Any] | None, result: dict[str, Any]) -> list[int]:
    """The depths of a `saved` evaluation that `result` does not measure."""
    if saved is None:
        return []
    return sorted(set(map(int, saved.get("depths", []))) - set(map(int, result["depths"])))


def cached_evaluation(
    run: str | Path,
    depths: list[int],
    held_out: HeldOut = HeldOut(),
    device: str | torch.device = "cpu",
    base: bool = False,
) -> tuple[dict[str, Any], bool]:
    """The evaluation of the run's newest checkpoint, from its saved JSON when that measured the
    same weights at the same depths on the same rows in the same precision (and, with `base`,
    the checkpoint directory the run started from beside them); else measured now and saved.

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
        and set(depths) <= set(saved.get("depths", []))
        and all(saved.get(key) == value for key, value in rows.items())
        and saved.get("rows") == held_out.rows
        and saved.get("validation_seed") == held_out.seed
        and saved.get("precision", "bf16" if run_precision else "fp32") == precision
        and (not base or config.model.checkpoint is None or saved.get("base") is not None)
    ):
        return only_depths(saved, depths), True
    with locks.holding(run, "eval"):  # measured now and written into the run
        result = evaluate_run(run, depths, held_out, ckpt.step, device, base=base)
        write_eval(result, path, replace=True)  # the cache follows the newest question
    return result, False


def only_depths(result: dict[str, Any], depths: list[int]) -> dict[str, Any]:
    """A saved evaluation cut to `depths` (it may hold more, joined from other evaluations)."""
    from fixedfirst.evaluation.nll import mean_serving_nll
    from fixedfirst.evaluation.profile import BY_DEPTH

    keys = [str(d) for d in depths]
    out = {**result, "depths": list(depths)}
    for entry in BY_DEPTH:
        if entry in result:
            out[entry] = {k: result[entry][k] for k in keys if k in result[entry]}
    if result.get("base") is not None:
        base = result["base"]
        out["base"] = {entry: {k: base[entry][k] for k in keys} for entry in base}
    out["mean_serving_nll"] = mean_serving_nll({int(k): v for k, v in out["nll_by_depth"].items()})
    return out
