"""The bios data kind: `[data] kind = "bios"` with its world in `[data.bios]`, and recall as the
task's own metric (`fixedfirst eval RUN --task bios`)."""

from __future__ import annotations

from fixedfirst.config import RunConfig
from fixedfirst.data.registry import DataKind, TaskReport, kind_options, register_kind
from fixedfirst.model import LoopedLM
from fixedfirst.tasks.bios.example import biography_example
from fixedfirst.tasks.bios.recall import evaluate_recall
from fixedfirst.tasks.bios.source import BiosSource
from fixedfirst.tasks.bios.world import BiosOptions, build_world


def evaluate_task(
    model: LoopedLM, config: RunConfig, depths: list[int], limit: int | None
) -> TaskReport:
    """Recalled bits per person at every depth, over the first `limit` people (default all)."""
    world = build_world(kind_options(config), config.data.seed)
    report = evaluate_recall(model, world, depths, people=limit)
    rows = [f"| {depth} | {bits:.2f} |" for depth, bits in report.bits().items()]
    return TaskReport(
        headline=(
            f"recalled bits per person ({report.people} people, ceiling {report.ceiling_bits:.2f})"
        ),
        table="\n".join(["| depth | bits |", "| --- | --- |", *rows]),
        record=report.to_dict(),
        score_name="recalled bits per person",
        scores=report.bits(),
    )


KIND = DataKind(
    name="bios",
    summary="fictional biographies to memorise; recall of their facts (the paper's Figure 1)",
    build=BiosSource.from_config,
    options=BiosOptions,
    evaluate=evaluate_task,
    example=biography_example,
)
register_kind(KIND)
