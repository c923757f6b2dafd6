"""The chains experiment's figures, drawn from results.json alone.

accuracy_by_depth.png       accuracy against serving depth, one panel per difficulty band (in
                            range, then beyond), one line per schedule: the mean over seeds, the
                            shaded band spanning the seeds
accuracy_by_difficulty.png  accuracy against difficulty at each schedule's deepest training
                            depth (16) and at the deepest serving depth, training range shaded
kl_exit.png                 the KL exit rule: depth used and accuracy against difficulty

Drawn on bare `matplotlib.figure.Figure`s (the Agg canvas writes the PNG), never through pyplot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from fixedfirst.files import save_figure

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


def plot_accuracy_by_depth(results: dict[str, Any], path: Path) -> None:
    a = results["analysis"]
    depths = results["experiment"]["depths"]
    bands = a["bands"]
    fig = Figure(figsize=(4.2 * len(bands), 4.4), layout="constrained")
    axes = fig.subplots(1, len(bands), sharey=True, squeeze=False)[0]
    for ax, band in zip(axes, bands, strict=True):
        for schedule in a["schedules"]:
            color, marker, ls = STYLES.get(schedule, ("black", "o", "-"))
            cells = [a["band_accuracy"][schedule][band["label"]][str(d)] for d in depths]
            style = {"color": color, "marker": marker, "ls": ls, "ms": 4, "lw": 1.5}
            means = [100 * c["mean"] for c in cells]
            ax.plot(depths, means, label=_label(results, schedule), **style)
            lows, highs = [100 * c["min"] for c in cells], [100 * c["max"] for c in cells]
            ax.fill_between(depths, lows, highs, color=color, alpha=0.15, lw=0)
        ax.axhline(100 * results["chance"], color="0.5", ls=":", lw=1)
        ax.axvline(a["training_depth"], color="0.3", ls="--", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xticks(depths)
        ax.set_xticklabels([str(d) for d in depths], fontsize=7)
        where = "in the training range" if band["in_range"] else "beyond the training range"
        ax.set_title(f"difficulty {band['label']} ({where})", fontsize=10)
        ax.set_xlabel("serving depth K")
        ax.grid(True, color="0.9", lw=0.6)
    axes[0].set_ylabel("exact-match accuracy (%)")
    axes[0].legend(fontsize=8, frameon=False, loc="lower right")  # the in-range lines sit high
    fig.suptitle(
        f"Chains at {results['flop_budget']:.1e} modeled FLOPs per run: accuracy against serving "
        f"depth (mean of {_seeds(results)}, shading spans them; dotted: chance; dashed: "
        f"K = {a['training_depth']})",
        fontsize=10,
    )
    save_figure(fig, path)


def plot_accuracy_by_difficulty(results: dict[str, Any], path: Path) -> None:
    a = results["analysis"]
    max_ops = results["task"]["max_ops"]
    depths = [a["training_depth"], a["deepest_depth"]]
    fig = Figure(figsize=(12, 4.4), layout="constrained")
    axes = fig.subplots(1, len(depths), sharey=True)
    for ax, depth in zip(axes, depths, strict=True):
        for schedule in a["schedules"]:
            color, marker, ls = STYLES.get(schedule, ("black", "o", "-"))
            accuracy = a["accuracy_by_difficulty"][schedule][str(depth)]
            style = {"color": color, "marker": marker, "ls": ls, "ms": 3, "lw": 1.4}
            percent = [100 * x for x in accuracy]
            ax.plot(range(len(accuracy)), percent, label=_label(results, schedule), **style)
        ax.axvspan(-0.5, max_ops + 0.5, color="0.92", lw=0)
        ax.axhline(100 * results["chance"], color="0.5", ls=":", lw=1)
        ax.set_title(f"serving depth K = {depth}", fontsize=10)
        ax.set_xlabel("difficulty d (operations applied; shaded: the training range)")
        ax.grid(True, color="0.9", lw=0.6)
    axes[0].set_ylabel("exact-match accuracy (%)")
    axes[0].legend(fontsize=8, frameon=False, loc="lower left")
    fig.suptitle(f"Accuracy against difficulty (mean of {_seeds(results)})", fontsize=10)
    save_figure(fig, path)


def plot_kl_exit(results: dict[str, Any], path: Path) -> None:
    a = results["analysis"]
    max_ops = results["task"]["max_ops"]
    fig = Figure(figsize=(12, 4.4), layout="constrained")
    used, right = fig.subplots(1, 2)
    for schedule in a["schedules"]:
        color, marker, ls = STYLES.get(schedule, ("black", "o", "-"))
        exit_rule = a["kl_exit"][schedule]
        xs = range(len(exit_rule["mean_depth"]))
        style = {"color": color, "marker": marker, "ls": ls, "ms": 3, "lw": 1.4}
        used.plot(xs, exit_rule["mean_depth"], label=_label(results, schedule), **style)
        right.plot(xs, [100 * x for x in exit_rule["accuracy"]], **style)
    first = a["kl_exit"][a["schedules"][0]]
    for ax in (used, right):
        ax.axvspan(-0.5, max_ops + 0.5, color="0.92", lw=0)
        ax.set_xlabel("difficulty d (operations applied; shaded: the training range)")
        ax.grid(True, color="0.9", lw=0.6)
    used.set_ylabel("mean depth used (core iterations)")
    right.set_ylabel("exact-match accuracy (%)")
    used.legend(fontsize=8, frameon=False)
    fig.suptitle(
        f"KL exit (threshold {first['threshold']:g}, at most {first['max_depth']} iterations): "
        f"does the model iterate longer on harder labels? (mean of {_seeds(results)})",
        fontsize=10,
    )
    save_figure(fig, path)


def plot_figures(results: dict[str, Any], out: Path) -> list[Path]:
    paths = [out / "accuracy_by_depth.png", out / "accuracy_by_difficulty.png", out / "kl_exit.png"]
    plot_accuracy_by_depth(results, paths[0])
    plot_accuracy_by_difficulty(results, paths[1])
    plot_kl_exit(results, paths[2])
    return paths
