"""A task's own metric of a run's newest checkpoint, at many serving depths, kept beside the run.

Validation NLL says how well a model predicts; on a task (`DataKind.evaluate`: bios recall,
chains accuracy) the task's metric says whether it answers. Experiments that compare schedules on
a task (the sweep with `metric = "task"`) score every run through here, so the score of a
checkpoint is measured once and read back after: RUN/eval-task-step-N.json records the weights'
checksum, the depths and how many task examples were scored, and is reused only for the same
question.

    {"format": "fixedfirst-task-eval", "version": 1, "task": "chains", "step": 1104,
     "weights_sha256": "...", "depths": [1, ..., 64], "limit": null,
     "headline": "...", "score_name": "...", "scores": {"1": 0.41, ...}, "record": {...}}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from fixedfirst.errors import UserError
from fixedfirst.files import locks
from fixedfirst.files.writing import write_json_atomic
from fixedfirst.runs.checkpoint import MODEL_FILE
from fixedfirst.runs.opening import find_checkpoint, load_any_run

TASK_EVAL_FORMAT = "fixedfirst-task-eval"
TASK_EVAL_VERSION = 1


def task_eval_path(run: str | Path, step: int) -> Path:
    return Path(run) / f"eval-task-step-{step:07d}.json"


def cached_task_evaluation(
    run: str | Path,
    depths: list[int],
    limit: int | None = None,
    device: str | torch.device = "cpu",
) -> tuple[dict[str, Any], bool]:
    """The task metric of the run's newest checkpoint at `depths` (from the saved file when it
    scored the same weights at the same depths and limit); returns (result, reused)."""
    from fixedfirst.data.registry import data_kind

    config, ckpt = find_checkpoint(run)
    kind = data_kind(config.data.kind)
    if kind.evaluate is None:
        raise UserError(f"{run}: the data kind {config.data.kind!r} has no task metric")
    key = {
        "task": config.data.kind,
        "step": ckpt.step,
        "weights_sha256": ckpt.meta["files"][MODEL_FILE],
        "depths": list(depths),
        "limit": limit,
    }
    path = task_eval_path(run, ckpt.step)
    try:
        saved = json.loads(path.read_text())
        if saved.get("format") == TASK_EVAL_FORMAT and {k: saved.get(k) for k in key} == key:
            return saved, True
    except (OSError, ValueError):
        pass
    with locks.holding(run, "eval"):  # measured now and written into the run
        loaded = load_any_run(run, ckpt.step, device)
        report = kind.evaluate(loaded.model, loaded.config, list(depths), limit)
        result = {
            "format": TASK_EVAL_FORMAT,
            "version": TASK_EVAL_VERSION,
            **key,
            "headline": report.headline,
            "score_name": report.score_name,
            "scores": {str(d): v for d, v in report.scores.items()},
            "record": report.record,
        }
        write_json_atomic(path, result)
    return result, False
