"""One finished run scored on the chains evaluation sets, cached beside the run.

For the final checkpoint, on the run's own draw of evaluation sequences (`source.evaluation_seed`:
the data seed and the training seed): accuracy at every (serving depth, difficulty) on every named
set (`sets.py`), each difficulty band's mean per depth, the same on the selection set (sequences
like the standard set's from a separate stream, on which a depth may be chosen), and the KL exit
rule's accuracy and depth per difficulty on the standard set. Scoring at depth 64 on every set and
decoding under KL exit cost about as much as a few hundred training steps, so the result is
written to RUN/chains-eval-step-N.json with what it measured and reused when asked the same
question again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fixedfirst.data.registry import kind_options
from fixedfirst.files.writing import write_json_atomic
from fixedfirst.runs.checkpoint import MODEL_FILE
from fixedfirst.runs.opening import load_run
from fixedfirst.serve.adaptive import KLExit
from fixedfirst.tasks.chains.accuracy import (
    Correctness,
    correctness_by_depth,
    kl_exit_by_difficulty,
)
from fixedfirst.tasks.chains.bands import bands_of
from fixedfirst.tasks.chains.program import SELECTION_STREAM, ChainsOptions
from fixedfirst.tasks.chains.sets import SETS, STANDARD
from fixedfirst.tasks.chains.source import evaluation_seed, evaluation_set

SCORE_FORMAT = "fixedfirst-chains-scores"
SCORE_VERSION = 2


def band_table(correct: Correctness, options: ChainsOptions) -> dict[str, Any]:
    """Accuracy per difficulty at every depth, and each band's mean per depth."""
    bands = {}
    for band in bands_of(options):
        means = correct.band_scores(band.low, band.high).mean(axis=1)
        bands[band.label] = {
            "low": band.low,
            "high": band.high,
            "in_range": band.in_range,
            "by_depth": {str(d): float(means[k]) for k, d in enumerate(correct.depths)},
        }
    return {
        "accuracy": {str(d): a for d, a in correct.accuracy().items()},
        "bands": bands,
    }


def score_run(
    run: Path,
    depths: list[int],
    sequences: int,
    rule: KLExit,
    sets: list[str],
    set_sequences: int,
) -> dict[str, Any]:
    """The scores of the run's newest checkpoint (from its cache file when it holds them).

    sequences: of the standard set and of the selection set; set_sequences: of every other set."""
    loaded = load_run(run)
    ckpt = loaded.checkpoint
    config = loaded.config
    seed = evaluation_seed(config.data.seed, config.train.seed)
    key = {
        "version": SCORE_VERSION,
        "weights_sha256": ckpt.meta["files"][MODEL_FILE],
        "evaluation_seed": seed,
        "depths": sorted(set(depths)),
        "sequences": sequences,
        "sets": list(sets),
        "set_sequences": set_sequences,
        "kl_threshold": rule.threshold,
        "kl_max_depth": rule.max_depth,
    }
    cache = run / f"chains-eval-step-{ckpt.step:07d}.json"
    try:
        saved = json.loads(cache.read_text())
        if saved.get("format") == SCORE_FORMAT and saved.get("key") == key:
            return saved["scores"]
    except (OSError, ValueError):
        pass
    options = kind_options(config)
    scored = {}
    standard = evaluation_set(options, seed, sequences)
    for name in sets:
        spec = SETS[name]
        n = sequences if name == STANDARD else set_sequences
        evaluation = standard if name == STANDARD else evaluation_set(options, seed, n, spec)
        correct = correctness_by_depth(loaded.model, evaluation, key["depths"])
        scored[name] = {
            "sequences": n,
            "eval_ops": spec.options(options).eval_ops,
            **band_table(correct, spec.options(options)),
        }
    selection = evaluation_set(options, seed, sequences, SETS[STANDARD], SELECTION_STREAM)
    scores = {
        "step": ckpt.step,
        "evaluation_seed": seed,
        "sets": scored,
        "selection": {
            "sequences": sequences,
            **band_table(correctness_by_depth(loaded.model, selection, key["depths"]), options),
        },
        "kl_exit": kl_exit_by_difficulty(loaded.model, standard, rule).to_dict(),
    }
    write_json_atomic(cache, {"format": SCORE_FORMAT, "key": key, "scores": scores})
    return scores
