"""The chains data kind: `[data] kind = "chains"` with the task in `[data.chains]`, and accuracy
by serving depth and difficulty as the task's own metric (`fixedfirst eval RUN --task chains`)."""

from __future__ import annotations

from fixedfirst.config import RunConfig
from fixedfirst.data.registry import DataKind, TaskReport, kind_options, register_kind
from fixedfirst.model import LoopedLM
from fixedfirst.tasks.chains.accuracy import correctness_by_depth
from fixedfirst.tasks.chains.bands import bands_of
from fixedfirst.tasks.chains.example import evaluation_example, label_words
from fixedfirst.tasks.chains.program import ChainsOptions
from fixedfirst.tasks.chains.source import ChainsSource, evaluation_seed, evaluation_set

DEFAULT_SEQUENCES = 256
"""Evaluation sequences scored when no --limit is given."""


def evaluate_task(
    model: LoopedLM, config: RunConfig, depths: list[int], limit: int | None
) -> TaskReport:
    """Accuracy per serving depth in each difficulty band, on the first `limit` sequences."""
    options: ChainsOptions = kind_options(config)
    seed = evaluation_seed(config.data.seed, config.train.seed)
    evaluation = evaluation_set(options, seed, limit or DEFAULT_SEQUENCES)
    correct = correctness_by_depth(model, evaluation, depths)
    bands = bands_of(options)
    header = "| depth | " + " | ".join(f"d {b.label}" for b in bands) + " |"
    rows = [header, "|" + " --- |" * (len(bands) + 1)]
    by_band = {b.label: correct.band_scores(b.low, b.high).mean(axis=1) for b in bands}
    for k, depth in enumerate(correct.depths):
        rows.append(
            f"| {depth} | " + " | ".join(f"{100 * by_band[b.label][k]:.1f}" for b in bands) + " |"
        )
    hard = [b for b in bands if b.in_range][-1]  # the harder half of the training range
    return TaskReport(
        headline=(
            f"exact-match accuracy (%) by difficulty d = operations applied "
            f"({evaluation.sequences} sequences; training range d 0..{options.max_ops})"
        ),
        table="\n".join(rows),
        record={
            "sequences": evaluation.sequences,
            "bands": {b.label: [b.low, b.high] for b in bands},
            "accuracy": {str(d): a for d, a in correct.accuracy().items()},
            "band_accuracy": {
                label: {str(d): float(v[k]) for k, d in enumerate(correct.depths)}
                for label, v in by_band.items()
            },
        },
        score_name=f"accuracy at difficulty {hard.label} (the harder half of the training range)",
        scores={d: float(by_band[hard.label][k]) for k, d in enumerate(correct.depths)},
    )


KIND = DataKind(
    name="chains",
    summary="chains of +1 / neg operations on a value: every answer needs one update per "
    "operation, so serving depth decides it",
    build=ChainsSource.from_config,
    options=ChainsOptions,
    evaluate=evaluate_task,
    example=evaluation_example,
    label=label_words,
)
register_kind(KIND)
