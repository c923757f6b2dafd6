"""report.png of the serving-economics study, drawn from report.json alone: per study, each
arm's recurrent iterations saved at matched quality (left) and saved by exiting beyond the
cheapest matching fixed depth (right), every seed a dot and the mean with its 95% interval over
seeds a bar. Drawn on a bare `matplotlib.figure.Figure`, never through pyplot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from fixedfirst.files.writing import save_figure
from fixedfirst.studies.serving.comparison import analyse
from fixedfirst.studies.serving.report import QUANTITY_WORDS


def plot_economics(numbers: dict[str, Any], path: Path) -> None:
    analysis = analyse(numbers)
    studies = [s for s in numbers["studies"] if analysis["studies"][s["name"]]["arms"]]
    rows = max(1, len(studies))
    fig = Figure(figsize=(10, 3.2 * rows), layout="constrained")
    axes = fig.subplots(rows, 2, squeeze=False)
    for row, study in zip(axes, studies, strict=False):
        arms = analysis["studies"][study["name"]]["arms"]
        runs = numbers["runs"][study["name"]].values()
        for ax, quantity in zip(row, QUANTITY_WORDS, strict=True):
            for x, (arm, a) in enumerate(arms.items()):
                values = [100 * r["by"]["iterations"][quantity] for r in runs if r["arm"] == arm]
                ax.plot([x] * len(values), values, "o", color="0.6", ms=4, zorder=1)
                cell = a["by"]["iterations"][quantity]
                if cell["low"] is not None:
                    low, high = 100 * cell["low"], 100 * cell["high"]
                    ax.plot([x, x], [low, high], color="tab:blue", lw=2, zorder=2)
                ax.plot(x, 100 * cell["mean"], "_", color="tab:blue", ms=18, mew=2, zorder=3)
            ax.set_xticks(range(len(arms)))
            ax.set_xticklabels(list(arms), fontsize=8, rotation=15)
            ax.set_ylabel("% of recurrent iterations")
            ax.set_title(f"{study['name']}: {QUANTITY_WORDS[quantity]}", fontsize=9)
            ax.grid(True, axis="y", color="0.9", lw=0.6)
    fig.suptitle(
        "Serving economics by schedule: recurrent compute saved at matched quality (dots: seeds; "
        "bars: mean and 95% interval over seeds)",
        fontsize=10,
    )
    save_figure(fig, path)
