"""One finished run scored on the chains evaluation set, cached beside the run.

For the final checkpoint: accuracy at every (serving depth, difficulty), each difficulty band's
mean with its 95% t-interval over evaluation sequences, every sequence's band score (kept for
paired comparisons between depths), and the KL exit rule's accuracy and depth per difficulty.
Scoring at depth 64 and decoding under KL exit cost about as much as a few hundred training
steps, so the result is written to RUN/chains-eval-step-N.json with what it measured and reused
when asked the same question again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fixedfirst.data.registry import kind_options
from fixedfirst.experiments.chains.accuracy import correctness_by_depth, kl_exit_by_difficulty
from fixedfirst.experiments.chains.bands import bands_of
from fixedfirst.experiments.chains.source import evaluation_set
from fixedfirst.files import write_json_atomic
from fixedfirst.intervals import t_interval
from fixedfirst.runs.opening import load_run
from fixedfirst.serve.adaptive import KLExit
from fixedfirst.train.checkpoint import MODEL_FILE

SCORE_FORMAT = "fixedfirst-chains-scores"


def score_run(
    run: Path, depths: list[int], sequences: int, rule: KLExit, quiet: bool = True
) -> dict[str, Any]:
    """The scores of the run's newest checkpoint (from its cache file when it holds them)."""
    loaded = load_run(run)
    ckpt = loaded.checkpoint
    key = {
        "weights_sha256": ckpt.meta["files"][MODEL_FILE],
        "depths": sorted(set(depths)),
        "sequences": sequences,
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
    options = kind_options(loaded.config)
    evaluation = evaluation_set(options, loaded.config.data.seed, sequences)
    correct = correctness_by_depth(loaded.model, evaluation, key["depths"])
    bands = {}
    for band in bands_of(options):
        per_sequence = correct.band_scores(band.low, band.high)
        bands[band.label] = {
            "low": band.low,
            "high": band.high,
            "in_range": band.in_range,
            "by_depth": {
                str(d): t_interval(per_sequence[k]).to_dict() for k, d in enumerate(correct.depths)
            },
            "per_sequence": {
                str(d): per_sequence[k].round(6).tolist() for k, d in enumerate(correct.depths)
            },
        }
    exit_result = kl_exit_by_difficulty(loaded.model, evaluation, rule)
    scores = {
        "step": ckpt.step,
        "sequences": evaluation.sequences,
        "accuracy": {str(d): a for d, a in correct.accuracy().items()},
        "bands": bands,
        "kl_exit": exit_result.to_dict(),
    }
    write_json_atomic(cache, {"format": SCORE_FORMAT, "key": key, "scores": scores})
    return scores
