"""Figure 4: the update diagnostic as a picture.

Left: Benefit(k) against serving depth k at the switch point (u = 0) and after 16 finishing
updates, with 95% interval bands: where the deep update helps, and whether that survives the
first finishing updates. Right: the depth-averaged benefit against u with its intervals and the
zero line; u runs on a symlog axis so that u = 0 sits beside 1, 2, 4, ..., 32. The intervals are
the ones in results.json (over training batches and held-out sequences, `summary`).

Drawn on a bare `matplotlib.figure.Figure` (the Agg canvas writes the PNG), never through
pyplot: no global backend switch, no display needed, nothing left open.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.figure import Figure

from fixedfirst.files.writing import save_figure

INTERVAL_NAME = "bootstrap interval"
PANEL_UPDATES = (0, 16)
"""The u values of the left panel (the paper's); missing ones fall back to the first and last."""


def _panel_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    rows = {row["u"]: row for row in results["results"]}
    chosen = [rows[u] for u in PANEL_UPDATES if u in rows]
    if len(chosen) < 2:
        chosen = [rows[u] for u in sorted({min(rows), max(rows)})]
    return chosen


def plot_figure4(results: dict[str, Any], path: str | Path) -> Path:
    """Draw the two panels from a `results.json` dictionary into `path` (PNG)."""
    out = Path(path)
    save_figure(figure4(results), out)
    return out


def figure4(results: dict[str, Any]) -> Figure:
    """The two panels from a `results.json` dictionary."""
    shallow, deep = results["depths"]["shallow"], results["depths"]["deep"]
    level = f"{100 * results['interval']['level']:g}%"
    ks = results["serving_depths"]
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    left, right = fig.subplots(1, 2)

    colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    for color, row in zip(colors, _panel_rows(results), strict=False):
        stats = [row["benefit"][str(k)] for k in ks]
        mean = [s["mean"] for s in stats]
        left.fill_between(
            ks, [s["low"] for s in stats], [s["high"] for s in stats], color=color, alpha=0.2
        )
        left.plot(ks, mean, "o-", color=color, ms=3.5, label=f"u = {row['u']}")
    left.axhline(0.0, color="black", lw=0.8)
    for k, text in ((shallow, f"K={shallow}"), (deep, f"K={deep}")):
        if ks[0] <= k <= ks[-1]:
            left.axvline(k, color="grey", lw=0.6, ls=":")
            left.annotate(text, (k, 1.0), xycoords=("data", "axes fraction"), ha="center",
                          va="bottom", fontsize=8, color="grey")  # fmt: skip
    left.set_xlabel("serving depth k")
    left.set_ylabel(f"Benefit(k) = NLL after K={shallow} − after K={deep}  (nats)")
    left.set_title(f"benefit by serving depth ({level} {INTERVAL_NAME}s)", fontsize=10, pad=14)
    left.legend(frameon=False)

    rows = results["results"]
    us = [row["u"] for row in rows]
    averages = [row["depth_average"] for row in rows]
    # Drawn from its ends, not as mean ± error: a percentile interval need not be symmetric.
    low, high = [a["low"] for a in averages], [a["high"] for a in averages]
    right.vlines(us, low, high, color=colors[2])
    right.plot(us, low, "_", us, high, "_", color=colors[2], ms=8)
    right.plot(us, [a["mean"] for a in averages], "o-", ms=4, color=colors[2])
    right.axhline(0.0, color="black", lw=0.8)
    right.set_xscale("symlog", linthresh=1)
    right.set_xticks(us)
    right.set_xticklabels([str(u) for u in us])
    if len(us) > 1:
        right.set_xlim(-0.3 if us[0] == 0 else us[0] / 1.3, us[-1] * 1.3)
    right.set_xlabel("finishing updates u since the checkpoint")
    right.set_ylabel(f"mean over k={ks[0]}..{ks[-1]} of Benefit(k)  (nats)")
    start = results["contains_zero_from_u"]
    note = (
        "the last u excludes 0" if start is None else f"every interval from u = {start} contains 0"
    )
    right.set_title(f"depth-averaged benefit ({level} {INTERVAL_NAME}s)\n{note}", fontsize=10)

    for ax in (left, right):
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
        ax.grid(alpha=0.25)
    fig.suptitle(
        f"Update diagnostic: {results['schedule']}, from step {results['checkpoint']['step']}, "
        f"update RMS matched to the {results['rms_reference'].replace('-', ' ')}\n"
        f"{results['batches']} training batches x {results['heldout']['sequences']} held-out "
        "sequences per u; intervals resample both",
        fontsize=10,
    )
    return fig
