"""`nll_by_depth.png`: validation NLL against serving depth, one line per schedule.

Left: NLL itself. Right: NLL minus the reference run's at the same depth, because the schedules
differ by a few hundredths of a nat on a curve that spans a whole nat, and on the left those
differences are a line's width. The x axis is logarithmic (depths 1..16, then 32 and 64 beyond
the training range, which is shaded). Styles carry the schedule's structure so that 16 lines stay
readable: the reference is thick black, fixed-first runs are coloured by K0, dashed for a
Poisson-lognormal finish, with one marker per switch fraction; the other schedules get their own
colours.

Drawn on a bare `matplotlib.figure.Figure` (the Agg canvas writes the PNG), never through pyplot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullLocator

from fixedfirst.files import save_figure

K0_COLORS = ("tab:blue", "tab:green", "tab:orange", "tab:red", "tab:brown", "tab:pink")
SWITCH_MARKERS = ("o", "s", "^", "D", "v")
OTHER_COLORS = {"progressive": "tab:purple", "uniform": "tab:gray"}


def line_styles(rows: list[dict[str, Any]], reference: str | None) -> dict[str, dict[str, Any]]:
    """matplotlib keyword arguments per run name."""
    ff = [r["schedule_config"] for r in rows if r["kind"] == "fixed-first"]
    k0s = sorted({s["k0"] for s in ff})
    switches = sorted(
        {s["switch"] for s in ff}, key=lambda x: (x == "auto", 0.0 if x == "auto" else x)
    )
    styles = {}
    for r in rows:
        s = r["schedule_config"]
        if r["name"] == reference:
            style = {"color": "black", "lw": 2.6, "marker": "o", "zorder": 5}
        elif r["kind"] == "fixed-first":
            style = {
                "color": K0_COLORS[k0s.index(s["k0"]) % len(K0_COLORS)],
                "ls": "-" if s["finish"] == "uniform" else "--",
                "marker": SWITCH_MARKERS[switches.index(s["switch"]) % len(SWITCH_MARKERS)],
            }
        else:
            style = {"color": OTHER_COLORS.get(r["kind"], "tab:olive"), "marker": "x"}
            if r["compute_matched_to"]:
                style["ls"] = ":"
        style.setdefault("lw", 1.4)
        style.setdefault("ms", 3.5)
        styles[r["name"]] = style
    return styles


def _depth_axis(ax, depths: list[int], train_max: int) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator([d for d in depths if d & (d - 1) == 0]))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter("{x:g}")
    ax.axvspan(depths[0], train_max, color="0.93", zorder=0)
    ax.set_xlabel("serving depth K (shaded: training depths)")
    ax.grid(True, which="major", color="0.85", lw=0.6)


def plot_nll_by_depth(rows: list[dict[str, Any]], reference: str | None, path: str | Path) -> Path:
    """Draw every row's `nll_by_depth` into `path` (PNG)."""
    depths = sorted({int(d) for r in rows for d in r["nll_by_depth"]})
    train_max = max(max(r["schedule_config"].get("k_max", 16) for r in rows), depths[0])
    ref = next((r for r in rows if r["name"] == reference), None)
    styles = line_styles(rows, reference)
    fig = Figure(figsize=(13, 5.2), layout="constrained")
    left, right = fig.subplots(1, 2)
    for r in rows:
        ks = [d for d in depths if str(d) in r["nll_by_depth"]]
        nll = [r["nll_by_depth"][str(d)] for d in ks]
        label = r["name"] + (" (reference)" if r is ref else "")
        left.plot(ks, nll, label=label, **styles[r["name"]])
        if ref is not None:
            both = [d for d in ks if str(d) in ref["nll_by_depth"]]
            diff = [r["nll_by_depth"][str(d)] - ref["nll_by_depth"][str(d)] for d in both]
            right.plot(both, diff, **styles[r["name"]])
    for ax in (left, right):
        _depth_axis(ax, depths, train_max)
    left.set_ylabel("validation NLL (nats/token)")
    left.set_title("NLL by serving depth", fontsize=10)
    if ref is not None:
        right.axhline(0.0, color="black", lw=1.0)
        right.set_ylabel(f"NLL − NLL of {reference} (nats/token)")
        right.set_title(f"difference to {reference}: below 0 is better", fontsize=10)
    else:
        right.set_axis_off()
        why = "no reference run" if reference is None else f"{reference!r} not finished"
        right.text(0.5, 0.5, why, ha="center")
    fig.legend(loc="outside right center", fontsize=8, frameon=False)
    path = Path(path)
    save_figure(fig, path)
    return path
