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

from pathlib import Path
from typing import Any

from fixedfirst.data.registry import kind_options
from fixedfirst.runs.opening import load_run
from fixedfirst.serve.adaptive import KLExit
from fixedfirst.studies.kit.depth_scoring import cached, measured_key
from fixedfirst.tasks.chains.accuracy import band_table, correctness_by_depth, kl_exit_by_difficulty
from fixedfirst.tasks.chains.program import SELECTION_STREAM
from fixedfirst.tasks.chains.sets import SETS, STANDARD
from fixedfirst.tasks.chains.source import evaluation_seed, evaluation_set

SCORE_FORMAT = "fixedfirst-chains-scores"
SCORE_VERSION = 2


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
    key = measured_key(
        SCORE_VERSION,
        ckpt,
        seed,
        depths=sorted(set(depths)),
        sequences=sequences,
        sets=list(sets),
        set_sequences=set_sequences,
        kl_threshold=rule.threshold,
        kl_max_depth=rule.max_depth,
    )

    def compute() -> dict[str, Any]:
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
        selected = correctness_by_depth(loaded.model, selection, key["depths"])
        return {
            "step": ckpt.step,
            "evaluation_seed": seed,
            "sets": scored,
            "selection": {"sequences": sequences, **band_table(selected, options)},
            "kl_exit": kl_exit_by_difficulty(loaded.model, standard, rule).to_dict(),
        }

    cache = run / f"chains-eval-step-{ckpt.step:07d}.json"
    return cached(cache, SCORE_FORMAT, key, compute, "scores")
