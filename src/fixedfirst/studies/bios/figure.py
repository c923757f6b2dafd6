"""Figure 1: recalled bits per person against serving depth, one panel per budget fraction, one
line per arm: the mean over seeds, shaded: its 95% interval over seeds (with one seed, the line)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from fixedfirst.files.writing import save_figure

STYLE = {
    "fixed-4": ("fixed K=4", "tab:blue", "o"),
    "uniform-1-16": ("uniform 1..16", "tab:orange", "s"),
    "fixed-first-4-0.8": ("fixed-first K0=4, switch 0.8", "tab:green", "^"),
    "fixed-first-2-0.67": ("fixed-first K0=2, switch 0.67", "tab:purple", "D"),
    "fixed-first-4-0.8-wsd": ("fixed-first K0=4, switch 0.8, WSD lr", "tab:olive", "v"),
}


def label(arm: str) -> str:
    return STYLE.get(arm, (arm,))[0]


def plot_figure1(results: dict[str, Any], path: Path) -> None:
    a = results["analysis"]
    fractions = results["budget_fractions"]
    depths = results["depths"]
    ceiling = results["ceiling_bits"]
    n = len(a["seeds"])
    fig = Figure(figsize=(4.2 * len(fractions), 4.0), layout="constrained")
    axes = fig.subplots(1, len(fractions), sharey=True, squeeze=False)[0]
    for ax, fraction in zip(axes, fractions, strict=True):
        ax.axvspan(1, 16, color="0.92", zorder=0, label="training range 1..16")
        ax.axhline(ceiling, color="0.3", ls="--", lw=1, label=f"ceiling {ceiling:.2f} bits")
        for arm in a["arms"]:
            cell = a["cells"][arm].get(f"{fraction:g}")
            if cell is None:
                continue
            name, color, marker = STYLE.get(arm, (arm, "black", "o"))
            by_depth = [cell["by_depth"][str(d)] for d in depths]
            ax.plot(
                depths, [c["mean"] for c in by_depth], color=color, marker=marker, ms=4, lw=1.6,
                label=name,
            )  # fmt: skip
            if by_depth[0]["low"] is not None:
                ax.fill_between(
                    depths,
                    [c["low"] for c in by_depth],  # cut at 0 and the ceiling (analysis)
                    [c["high"] for c in by_depth],
                    color=color,
                    alpha=0.15,
                    lw=0,
                )
        ax.set_xscale("log", base=2)
        ax.set_xticks(depths)
        ax.set_xticklabels([str(d) for d in depths], fontsize=7)
        ax.set_xlim(min(depths) * 0.9, max(depths) * 1.1)
        ax.set_ylim(0, ceiling * 1.08)
        ax.set_title(f"{fraction:.0%} of the FLOP budget")
        ax.set_xlabel("serving depth K")
        ax.grid(alpha=0.3, which="major")
    axes[0].set_ylabel("recalled bits per person")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=4, fontsize=8, frameon=False)
    spread = f"mean of {n} seeds, shaded: 95% interval over seeds" if n > 1 else "one seed"
    fig.suptitle(
        f"bioS recall at matched training FLOPs ({results['flop_budget']:.2g} FLOPs, "
        f"{results['people']} people; {spread})",
        fontsize=11,
    )
    save_figure(fig, path)
