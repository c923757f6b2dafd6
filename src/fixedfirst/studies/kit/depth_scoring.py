"""A finished run of any looped model scored on the chains task by serving depth, cached beside it.

The chains study's scoring (studies/chains/scoring.py) reads our own model's one-pass readouts,
its named sets and the KL exit rule; the studies of a foreign model and of finishing stages
(studies/moe, studies/finishing) need less, for any model `load_any_run` opens: the accuracy at
every (depth, difficulty) of the standard evaluation set (the run's own draw: data seed and
training seed) and each difficulty band's mean by depth. A model without readouts between passes
costs one forward per depth, so the result is written to RUN/depth-scores-step-N.json with what
it measured and reused when asked the same question again (`cached`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fixedfirst.data.registry import kind_options
from fixedfirst.files.writing import write_json_atomic
from fixedfirst.runs.checkpoint import MODEL_FILE, Checkpoint
from fixedfirst.runs.opening import find_checkpoint, load_any_run
from fixedfirst.tasks.chains.accuracy import band_table, correctness_by_depth
from fixedfirst.tasks.chains.source import evaluation_seed, evaluation_set

SCORE_FORMAT = "fixedfirst-depth-scores"
SCORE_VERSION = 1


def cached(
    path: Path,
    form: str,
    key: dict[str, Any],
    compute: Callable[[], dict[str, Any]],
    holding: str = "value",
) -> dict[str, Any]:
    """What `path` holds for `key` (written in format `form`, under `holding`), or `compute()`
    written there: a measurement beside a run, reused when asked the same question again."""
    try:
        saved = json.loads(path.read_text())
        if saved.get("format") == form and saved.get("key") == key:
            return saved[holding]
    except (OSError, ValueError):
        pass
    value = compute()
    write_json_atomic(path, {"format": form, "key": key, holding: value})
    return value


def measured_key(version: int, ckpt: Checkpoint, seed: int, **asked: Any) -> dict[str, Any]:
    """What a measurement cached beside a run answers: its version, the weights measured (their
    hash), the draw of evaluation sequences, and what else was asked."""
    weights = ckpt.meta["files"][MODEL_FILE]
    return {"version": version, "weights_sha256": weights, "evaluation_seed": seed, **asked}


def score_by_depth(run: Path, depths: list[int], sequences: int) -> dict[str, Any]:
    """The newest checkpoint's chains accuracy by depth and difficulty, and by band."""
    config, ckpt = find_checkpoint(run)
    seed = evaluation_seed(config.data.seed, config.train.seed)
    key = measured_key(SCORE_VERSION, ckpt, seed, depths=sorted(set(depths)), sequences=sequences)

    def compute() -> dict[str, Any]:
        loaded = load_any_run(run, ckpt.step)
        options = kind_options(config)
        evaluation = evaluation_set(options, seed, sequences)
        correct = correctness_by_depth(loaded.model, evaluation, key["depths"])
        return {"step": ckpt.step, "evaluation_seed": seed, **band_table(correct, options)}

    return cached(run / f"depth-scores-step-{ckpt.step:07d}.json", SCORE_FORMAT, key, compute)
