"""Figure 1: recalled bits per person against serving depth, one panel per budget fraction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from fixedfirst.files import save_figure

STYLE = {
    "fixed-4": ("fixed K=4", "tab:blue", "o"),
    "uniform-1-16": ("uniform 1..16", "tab:orange", "s"),
    "fixed-first-4-0.8": ("fixed-first K0=4, switch 0.8", "tab:green", "^"),
}


def plot_figure1(results: dict[str, Any], path: Path) -> None:
    fractions = results["budget_fractions"]
    fig, axes = plt.subplots(1, len(fractions), figsize=(4.2 * len(fractions), 3.8), sharey=True)
    ceiling = results["ceiling_bits"]
    for ax, fraction in zip(axes, fractions, strict=True):
        ax.axvspan(1, 16, color="0.92", zorder=0, label="training range 1..16")
        ax.axhline(ceiling, color="0.3", ls="--", lw=1, label=f"ceiling {ceiling:.2f} bits")
        for name, (label, color, marker) in STYLE.items():
            points = sorted(
                (r["depth"], r["bits_per_person"])
                for r in results["recall"]
                if r["schedule"] == name and r["budget_fraction"] == fraction
            )
            if points:
                depths, bits = zip(*points, strict=True)
                ax.plot(depths, bits, color=color, marker=marker, ms=4, lw=1.6, label=label)
        ax.set_xscale("log", base=2)
        depths = results["depths"]
        ax.set_xticks(depths)
        ax.set_xticklabels([str(d) for d in depths], fontsize=7)
        ax.set_xlim(min(depths) * 0.9, max(depths) * 1.1)
        ax.set_ylim(0, ceiling * 1.08)
        ax.set_title(f"{fraction:.0%} of the FLOP budget")
        ax.set_xlabel("serving depth K")
        ax.grid(alpha=0.3, which="major")
    axes[0].set_ylabel("recalled bits per person")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=5, fontsize=8, frameon=False)
    fig.suptitle(
        f"bioS recall at matched training FLOPs ({results['flop_budget']:.2g} FLOPs, "
        f"{results['people']} people)",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    save_figure(fig, path)
    plt.close(fig)
