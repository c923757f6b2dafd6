"""The chains experiment's figures, drawn from results.json alone.

accuracy_by_depth.png       accuracy against serving depth on the standard set, one panel per
                            difficulty band (in range, then beyond), one line per schedule: the
                            mean over seeds, shaded: its 95% interval over seeds
accuracy_by_difficulty.png  accuracy against difficulty at each schedule's deepest training
                            depth (16) and at the deepest serving depth, training range shaded
sets.png                    every named set: hard-band accuracy at depth 16 and near-band
                            accuracy at the deepest depth, per schedule, with 95% intervals
kl_exit.png                 the KL exit rule: depth used and accuracy against difficulty

Drawn on bare `matplotlib.figure.Figure`s (the Agg canvas writes the PNG), never through pyplot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from fixedfirst.files.writing import save_figure
from fixedfirst.tasks.chains.sets import STANDARD

STYLES = {
    "fixed-4": ("tab:blue", "o", "-"),
    "uniform-1-16": ("tab:orange", "s", "--"),
    "fixed-first-4-0.8": ("tab:green", "^", "-"),
    "fixed-first-2-0.67": ("tab:purple", "D", "-."),
    "progressive": ("tab:red", "v", ":"),
}


def _label(results: dict[str, Any], schedule: str) -> str:
    return next(r["label"] for r in results["runs"].values() if r["schedule"] == schedule)


def _seeds(results: dict[str, Any]) -> str:
    n = len(results["experiment"]["seeds"])
    return f"{n} seed{'s' if n > 1 else ''}"


def _finish(fig: Figure, title: str, path: Path) -> None:
    fig.suptitle(title, fontsize=10)
    save_figure(fig, path)


def _style(schedule: str, size: float) -> dict[str, Any]:
    """A schedule's line: its color, marker and dashes, markers of `size`."""
    color, marker, ls = STYLES.get(schedule, ("black", "o", "-"))
    return {"color": color, "marker": marker, "ls": ls, "ms": size, "lw": 1.4}


def _by_difficulty(axes: Any, max_ops: int) -> None:
    """Axes whose x is the difficulty, the training range shaded."""
    for ax in axes:
        ax.axvspan(-0.5, max_ops + 0.5, color="0.92", lw=0)
        ax.set_xlabel("difficulty d (operations applied; shaded: the training range)")
        ax.grid(True, color="0.9", lw=0.6)


def plot_accuracy_by_depth(results: dict[str, Any], path: Path) -> None:
    a = results["analysis"]
    depths = results["experiment"]["depths"]
    roles = a["sets"][STANDARD]["bands"]
    fig = Figure(figsize=(4.2 * len(roles), 4.4), layout="constrained")
    axes = fig.subplots(1, len(roles), sharey=True, squeeze=False)[0]
    for ax, (role, band) in zip(axes, roles.items(), strict=True):
        for schedule in a["schedules"]:
            style = {**_style(schedule, 4), "lw": 1.5}
            cells = [a["band_accuracy"][schedule][STANDARD][role][str(d)] for d in depths]
            means = [100 * c["mean"] for c in cells]
            ax.plot(depths, means, label=_label(results, schedule), **style)
            if cells[0]["low"] is not None:
                lows, highs = [100 * c["low"] for c in cells], [100 * c["high"] for c in cells]
                ax.fill_between(depths, lows, highs, color=style["color"], alpha=0.15, lw=0)
        ax.axhline(100 * results["chance"], color="0.5", ls=":", lw=1)
        ax.axvline(a["training_depth"], color="0.3", ls="--", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xticks(depths)
        ax.set_xticklabels([str(d) for d in depths], fontsize=7)
        where = "in the training range" if role in ("easy", "hard") else "beyond the training range"
        ax.set_title(f"difficulty {band['label']} ({where})", fontsize=10)
        ax.set_xlabel("serving depth K")
        ax.grid(True, color="0.9", lw=0.6)
    axes[0].set_ylabel("exact-match accuracy (%)")
    axes[0].legend(fontsize=8, frameon=False, loc="lower right")  # the in-range lines sit high
    _finish(
        fig,
        f"Chains at {results['flop_budget']:.1e} modeled FLOPs per run: accuracy against serving "
        f"depth (mean of {_seeds(results)}, shaded: 95% interval over seeds; dotted: chance; "
        f"dashed: K = {a['training_depth']})",
        path,
    )


def plot_accuracy_by_difficulty(results: dict[str, Any], path: Path) -> None:
    a = results["analysis"]
    max_ops = results["task"]["max_ops"]
    depths = [a["training_depth"], a["deepest_depth"]]
    fig = Figure(figsize=(12, 4.4), layout="constrained")
    axes = fig.subplots(1, len(depths), sharey=True)
    _by_difficulty(axes, max_ops)
    for ax, depth in zip(axes, depths, strict=True):
        for schedule in a["schedules"]:
            accuracy = a["accuracy_by_difficulty"][schedule][STANDARD][str(depth)]
            percent = [100 * x for x in accuracy]
            style = _style(schedule, 3)
            ax.plot(range(len(accuracy)), percent, label=_label(results, schedule), **style)
        ax.axhline(100 * results["chance"], color="0.5", ls=":", lw=1)
        ax.set_title(f"serving depth K = {depth}", fontsize=10)
    axes[0].set_ylabel("exact-match accuracy (%)")
    axes[0].legend(fontsize=8, frameon=False, loc="lower left")
    _finish(fig, f"Accuracy against difficulty (mean of {_seeds(results)})", path)


def plot_kl_exit(results: dict[str, Any], path: Path) -> None:
    a = results["analysis"]
    max_ops = results["task"]["max_ops"]
    fig = Figure(figsize=(12, 4.4), layout="constrained")
    used, right = fig.subplots(1, 2)
    _by_difficulty((used, right), max_ops)
    for schedule in a["schedules"]:
        exit_rule = a["kl_exit"][schedule]
        xs = range(len(exit_rule["mean_depth"]))
        style = _style(schedule, 3)
        used.plot(xs, exit_rule["mean_depth"], label=_label(results, schedule), **style)
        right.plot(xs, [100 * x for x in exit_rule["accuracy"]], **style)
    first = a["kl_exit"][a["schedules"][0]]
    used.set_ylabel("mean depth used (core iterations)")
    right.set_ylabel("exact-match accuracy (%)")
    used.legend(fontsize=8, frameon=False)
    _finish(
        fig,
        f"KL exit (threshold {first['threshold']:g}, at most {first['max_depth']} iterations): "
        f"does the model iterate longer on harder labels? (mean of {_seeds(results)})",
        path,
    )


def plot_sets(results: dict[str, Any], path: Path) -> None:
    a = results["analysis"]
    cells = [("hard", a["training_depth"]), ("near", a["deepest_depth"])]
    names = list(a["sets"])
    fig = Figure(figsize=(12, 4.6), layout="constrained")
    axes = fig.subplots(1, len(cells), sharey=True)
    width = 0.8 / len(a["schedules"])
    for ax, (role, depth) in zip(axes, cells, strict=True):
        for i, schedule in enumerate(a["schedules"]):
            color, _, _ = STYLES.get(schedule, ("black", "o", "-"))
            xs: list[float] = []
            means: list[float] = []
            errors: list[list[float]] = [[], []]
            for j, name in enumerate(names):
                if role not in a["sets"][name]["bands"]:
                    continue
                c = a["band_accuracy"][schedule][name][role][str(depth)]
                xs.append(j - 0.4 + (i + 0.5) * width)
                means.append(100 * c["mean"])
                low = c["low"] if c["low"] is not None else c["mean"]
                high = c["high"] if c["high"] is not None else c["mean"]
                errors[0].append(100 * (c["mean"] - low))
                errors[1].append(100 * (high - c["mean"]))
            ax.bar(xs, means, width, color=color, label=_label(results, schedule))
            ax.errorbar(xs, means, yerr=errors, fmt="none", ecolor="0.2", lw=0.8, capsize=1.5)
        ax.axhline(100 * results["chance"], color="0.5", ls=":", lw=1)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
        ax.set_title(f"{role} band at serving depth K = {depth}", fontsize=10)
        ax.grid(True, axis="y", color="0.9", lw=0.6)
    axes[0].set_ylabel("exact-match accuracy (%)")
    axes[0].legend(fontsize=7, frameon=False, loc="lower left")
    _finish(
        fig,
        f"Harder and shifted evaluation sets (mean of {_seeds(results)}, bars: 95% interval over "
        "seeds; dotted: chance)",
        path,
    )


FIGURES = ("accuracy_by_depth.png", "accuracy_by_difficulty.png", "sets.png", "kl_exit.png")


def plot_figures(results: dict[str, Any], out: Path) -> list[Path]:
    paths = [out / name for name in FIGURES]
    for plot, path in zip(
        (plot_accuracy_by_depth, plot_accuracy_by_difficulty, plot_sets, plot_kl_exit),
        paths,
        strict=True,
    ):
        plot(results, path)
    return paths
