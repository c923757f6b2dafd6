"""The report of a study of arms scored by band and depth (`depth_arms.analyse_arms`): its
tables, its figure and its files, shared by the looped mixture-of-experts and finishing studies.

Drawn on a bare `matplotlib.figure.Figure` (the Agg canvas writes the PNG), never through pyplot.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from fixedfirst.files.writing import save_figure
from fixedfirst.studies.kit.depth_arms import BAND_CLAIMS, analyse_arms
from fixedfirst.studies.kit.paragraphs import table
from fixedfirst.studies.kit.report_files import Render, write_numbers_and_report

FIGURE = "accuracy_by_depth.png"
REPORT_SETTINGS = ("preset", "reference", "flop_budget", "chance", "model", "task", "experiment")
"""The results document's keys a report reads unchanged, in the order the report's JSON has them."""
Labels = Callable[[dict[str, Any]], dict[str, str]]
"""Each arm's name in the tables and the figure, from the report's numbers."""


@dataclass(frozen=True)
class DepthReport:
    """What such a study writes beside its results: report.json (the settings, and of every run
    its `run_fields`, cost and identity, and `run_values`, what was measured), report.md
    (`render` of report.json as read back) and the figure of accuracy by depth."""

    format: str
    run_fields: tuple[str, ...]
    run_values: tuple[str, ...]
    render: Render
    labels: Labels

    def numbers(self, results: dict[str, Any]) -> dict[str, Any]:
        """What report.md is computed from."""
        return {
            "format": self.format,
            "version": 1,
            **{key: results[key] for key in REPORT_SETTINGS},
            "wall_clock_s": results.get("wall_clock_s"),
            "workers": results.get("workers"),
            "runs": {
                name: {key: r[key] for key in self.run_fields + self.run_values}
                for name, r in results["runs"].items()
            },
        }

    def write(self, results: dict[str, Any], out: Path) -> list[Path]:
        """The figure, OUT/report.json and OUT/report.md made from it; the files written."""
        depths = results["experiment"]["depths"]
        labels = self.labels(results)
        plot_bands(results["analysis"], depths, labels, results["chance"], out / FIGURE)
        write_numbers_and_report(out, self.numbers(results), self.render)
        return [out / FIGURE, out / "report.json", out / "report.md"]


def analysed(numbers: dict[str, Any], compare_depths: list[int]) -> dict[str, Any]:
    """`analyse_arms` of a report's numbers: its runs, read with its primaries."""
    e = numbers["experiment"]
    primary = [BAND_CLAIMS.read(p) for p in e["primary"]]
    return analyse_arms(numbers["runs"], e["depths"], numbers["reference"], compare_depths, primary)


def accuracy_section(a: dict[str, Any], depths: list[int], labels: dict[str, str]) -> list[str]:
    """## Accuracy by depth: the figure, then a table per band."""
    lines = ["## Accuracy by depth", "", f"![accuracy by depth]({FIGURE})", ""]
    for role in a["bands"]:
        lines += [band_table(a, role, depths, labels), ""]
    return lines


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
    rows = [
        [labels.get(arm, arm), *(percent(a["band_accuracy"][arm][role][str(d)]) for d in depths)]
        for arm in a["arms"]
    ]
    head = [f"{role} ({band['label']})", *(f"K={d}" for d in depths)]
    return "\n".join(table(head, rows, compact=True))


def primary_table(a: dict[str, Any]) -> str:
    rows = []
    for p in a["primary"]:
        bar = "" if p["bar"] is None else f" (bar {100 * p['bar']:.0f})"
        rows.append(
            [
                p["name"],
                p["band"],
                f"{p['a']} K={p['a_depth']}",
                f"{p['b']} K={p['b_depth']}",
                points(p["difference"]),
                f"{p['verdict']}{bar}",
            ]
        )
    head = ["comparison", "band", "a", "b", "a - b, points [95%]", "verdict"]
    return "\n".join(table(head, rows, compact=True))


def versus_table(
    a: dict[str, Any],
    labels: dict[str, str],
    cell: Callable[[dict[str, Any] | None], str] = points,
) -> str:
    """Every arm minus the reference at each compared (quantity, depth), Holm's verdict beside;
    a difference written by `cell` (in points by default)."""
    cells = list(next(iter(a["versus_reference"].values()), {}))
    rows = [
        [labels.get(arm, arm), *(cell(row[c]) for c in cells)]
        for arm, row in a["versus_reference"].items()
    ]
    reference = labels.get(a["reference"], a["reference"])
    return "\n".join(table([f"arm - {reference}", *cells], rows, compact=True))


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
