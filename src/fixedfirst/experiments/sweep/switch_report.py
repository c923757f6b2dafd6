"""The switch study's outputs: its table, its numbers and its figure, written together.

Apart from `switch_study` (the arithmetic) and `switch_figure` (the drawing) so that neither of
those needs the other's module."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fixedfirst.experiments.sweep.switch_figure import plot_switch_study
from fixedfirst.experiments.sweep.switch_study import arms_of, study_markdown, verdicts
from fixedfirst.files import write_text_atomic


def write_study(rows: list[dict[str, Any]], metric: str, metric_name: str, out: Path) -> list[Path]:
    """switch_study.md, switch_study.json and switch_study.png in `out`."""
    arms = arms_of(rows, metric)
    if not arms:
        return []
    document = {
        "metric": metric,
        "metric_name": metric_name,
        "lower_is_better": metric == "nll",
        "arms": [
            {**asdict(a), "mean": a.mean, "spread": a.spread, "compute": a.compute} for a in arms
        ],
        "verdicts": [
            {**asdict(v), "quality_miss": v.quality_miss, "compute_miss": v.compute_miss}
            for v in verdicts(arms, metric == "nll")
        ],
    }
    write_text_atomic(out / "switch_study.json", json.dumps(document, indent=2) + "\n")
    write_text_atomic(out / "switch_study.md", study_markdown(arms, metric, metric_name))
    figure = plot_switch_study(arms, metric, metric_name, out / "switch_study.png")
    return [out / "switch_study.md", out / "switch_study.json", figure]
