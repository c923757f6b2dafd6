"""Markdown tables and a figure of arms scored by band and depth (`depth_arms.analyse_arms`),
shared by the reports of the looped mixture-of-experts and finishing studies.

Drawn on a bare `matplotlib.figure.Figure` (the Agg canvas writes the PNG), never through pyplot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from fixedfirst.files.writing import save_figure


def percent(cell: dict[str, Any]) -> str:
    """An accuracy over seeds as 'mean [low, high]' in percent (no interval with one seed)."""
    if cell["low"] is None:
        return f"{100 * cell['mean']:.1f}"
    return f"{100 * cell['mean']:.1f} [{100 * cell['low']:.1f}, {100 * cell['high']:.1f}]"


def points(d: dict[str, Any] | None) -> str:
    """A same-seed difference in points with its interval (and Holm's verdict when it has one)."""
    if d is None:
        return "n/a"
    text = f"{100 * d['mean']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"
    return f"{text} {d['holm']}" if "holm" in d else text


def band_table(a: dict[str, Any], role: str, depths: list[int], labels: dict[str, str]) -> str:
    """Rows: arms; columns: depths; cells: the band's accuracy over seeds."""
    band = a["bands"][role]
    head = f"| {role} ({band['label']}) | " + " | ".join(f"K={d}" for d in depths) + " |"
    lines = [head, "|" + "---|" * (len(depths) + 1)]
    for arm in a["arms"]:
        cells = [percent(a["band_accuracy"][arm][role][str(d)]) for d in depths]
        lines.append(f"| {labels.get(arm, arm)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def primary_table(a: dict[str, Any]) -> str:
    lines = [
        "| comparison | band | a | b | a - b, points [95%] | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for p in a["primary"]:
        bar = "" if p["bar"] is None else f" (bar {100 * p['bar']:.0f})"
        lines.append(
            f"| {p['name']} | {p['band']} | {p['a']} K={p['a_depth']} | {p['b']} K={p['b_depth']} "
            f"| {points(p['difference'])} | {p['verdict']}{bar} |"
        )
    return "\n".join(lines)


def versus_table(a: dict[str, Any], labels: dict[str, str]) -> str:
    """Every arm minus the reference at each compared (band, depth), Holm's verdict beside."""
    cells = list(next(iter(a["versus_reference"].values()), {}))
    lines = [
        "| arm - " + labels.get(a["reference"], a["reference"]) + " | " + " | ".join(cells) + " |",
        "|" + "---|" * (len(cells) + 1),
    ]
    for arm, row in a["versus_reference"].items():
        shown = " | ".join(points(row[c]) for c in cells)
        lines.append(f"| {labels.get(arm, arm)} | {shown} |")
    return "\n".join(lines)


def plot_bands(
    a: dict[str, Any], depths: list[int], labels: dict[str, str], chance: float, path: Path
) -> None:
    """Accuracy against depth, one panel per band, one line per arm (mean, 95% band shaded)."""
    roles = list(a["bands"])
    fig = Figure(figsize=(4.0 * len(roles), 3.8), layout="constrained")
    axes = fig.subplots(1, len(roles), sharey=True, squeeze=False)[0]
    for ax, role in zip(axes, roles, strict=True):
        for arm in a["arms"]:
            cells = [a["band_accuracy"][arm][role][str(d)] for d in depths]
            means = [100 * c["mean"] for c in cells]
            (line,) = ax.plot(depths, means, marker="o", ms=3, label=labels.get(arm, arm))
            if cells[0]["low"] is not None:
                ax.fill_between(
                    depths,
                    [100 * c["low"] for c in cells],
                    [100 * c["high"] for c in cells],
                    color=line.get_color(),
                    alpha=0.15,
                    lw=0,
                )
        ax.axhline(100 * chance, color="0.5", ls=":", lw=1)
        ax.set_title(f"{role}: difficulty {a['bands'][role]['label']}")
        ax.set_xlabel("serving depth (passes)")
    axes[0].set_ylabel("accuracy (%)")
    axes[0].legend(fontsize=7)
    save_figure(fig, path)
