"""frontier.png: one model's exit frontier, drawn from its frontier.json alone.

Left: quality against recurrent iterations per token, the fixed depths as one line and each exit
rule as a line over its thresholds, the Pareto front as a grey step and the matched-quality
target dotted, the least-compute point that meets it ringed. Right: tokens per second of batched
greedy decoding against the depth that decoding used, the same marks. Drawn on a bare
`matplotlib.figure.Figure` (the Agg canvas writes the PNG), never through pyplot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from fixedfirst.files.writing import save_figure
from fixedfirst.serve.pareto import QualityMeasure, matched_quality, pareto_front

STYLES = {
    None: ("black", "o", "-"),
    "kl": ("tab:blue", "s", "--"),
    "entropy": ("tab:orange", "^", "-."),
    "state": ("tab:green", "D", ":"),
    "argmax": ("tab:red", "v", "--"),
}
"""Colour, marker and line of the fixed depths (None) and of each rule."""


def _series(points: list[dict[str, Any]]) -> dict[str | None, list[int]]:
    groups: dict[str | None, list[int]] = {}
    for i, p in enumerate(points):
        groups.setdefault(p["rule"], []).append(i)
    return groups


def _scaled(value: float, measure: QualityMeasure) -> float:
    return 100 * value if measure.name == "accuracy" else value


def _ring(ax: Any, x: float, y: float) -> None:
    """Ring the point of the least compute that matches the best fixed depth."""
    ax.plot(x, y, "o", ms=12, mfc="none", mec="black")


def plot_frontier(document: dict[str, Any], path: Path) -> None:
    points = document["points"]
    measure = QualityMeasure.from_dict(document["quality"])
    matched = matched_quality(points, measure)
    front = pareto_front(points, measure)
    least = matched["by"]["iterations"]["point"]
    timed = all(p.get("tokens_per_s") is not None for p in points)
    fig = Figure(figsize=(11 if timed else 5.8, 4.4), layout="constrained")
    axes = fig.subplots(1, 2 if timed else 1, squeeze=False)[0]
    ax = axes[0]
    for rule, indices in _series(points).items():
        color, marker, ls = STYLES.get(rule, ("0.4", "o", "-"))
        name = "fixed depth" if rule is None else f"{rule} exit"
        xs = [points[i]["mean_depth"] for i in indices]
        ys = [_scaled(points[i]["quality"], measure) for i in indices]
        ax.plot(xs, ys, color=color, marker=marker, ls=ls, ms=4, lw=1.2, label=name)
    fx = [points[i]["mean_depth"] for i in front]
    fy = [_scaled(points[i]["quality"], measure) for i in front]
    ax.step(fx, fy, where="post", color="0.6", lw=3, alpha=0.4, zorder=0, label="Pareto front")
    ax.axhline(_scaled(matched["target"], measure), color="0.3", ls=":", lw=1, label="matched")
    _ring(ax, points[least]["mean_depth"], _scaled(points[least]["quality"], measure))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("recurrent iterations per token (teacher-forced)")
    unit = "%" if measure.name == "accuracy" else measure.unit
    ax.set_ylabel(f"{measure.name} ({unit})")
    ax.grid(True, color="0.9", lw=0.6)
    ax.legend(fontsize=7, frameon=False)
    ax.set_title(f"quality: {measure.better} is better", fontsize=10)
    if timed:
        ax = axes[1]
        for rule, indices in _series(points).items():
            color, marker, ls = STYLES.get(rule, ("0.4", "o", "-"))
            xs = [points[i]["decode_mean_depth"] for i in indices]
            ys = [points[i]["tokens_per_s"] for i in indices]
            ax.plot(xs, ys, color=color, marker=marker, ls=ls if rule is None else "", ms=4, lw=1.2)
        _ring(ax, points[least]["decode_mean_depth"], points[least]["tokens_per_s"])
        ax.set_xscale("log", base=2)
        ax.set_xlabel("recurrent iterations per decoded token")
        ax.set_ylabel("tokens per second (batched greedy decoding)")
        ax.grid(True, color="0.9", lw=0.6)
        sp = document["speed"]
        ax.set_title(f"speed: {sp['rows']} prompts in one batch, {sp['device']}", fontsize=10)
    fig.suptitle(
        f"Exit frontier of {document['run']} (step {document['step']}; {document['schedule']}); "
        "ringed: the least compute that matches the best fixed depth",
        fontsize=10,
    )
    save_figure(fig, path)
