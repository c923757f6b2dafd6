"""`nll_by_depth.png`: validation NLL against serving depth, one line per schedule.

Left: NLL itself. Right: NLL minus the reference run's at the same depth, because the schedules
differ by a few hundredths of a nat on a curve that spans a whole nat, and on the left those
differences are a line's width. The x axis is logarithmic (depths 1..16, then 32 and 64 beyond
the training range, which is shaded). Styles carry the schedule's structure so that 16 lines stay
readable: the reference is thick black, fixed-first runs are coloured by K0, dashed for a
Poisson-lognormal finish, with one marker per switch fraction; the other schedules get their own
colours; the shorter runs of a training-length study are faint.

A sweep over seeds draws one line per entry, the mean over its seeds at each depth, and on the
right the mean over seeds of the paired difference to the reference entry (same seed), so that a
table of 19 entries x 3 seeds stays a readable figure.

Drawn on a bare `matplotlib.figure.Figure` (the Agg canvas writes the PNG), never through pyplot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullLocator

from fixedfirst.files.writing import save_figure

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
    most_tokens = max(r["tokens"] for r in rows)
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
        if r["tokens"] < most_tokens and not r["compute_matched_to"]:  # a length study: faint
            style.update(alpha=0.45, lw=0.9)
        style.setdefault("lw", 1.4)
        style.setdefault("ms", 3.5)
        styles[r["name"]] = style
    return styles


def mean_over_seeds(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per entry (`group`), named by it, whose `nll_by_depth` is the mean over the entry's
    seeds at each depth every seed was measured at."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r)
    means = []
    for group, members in groups.items():
        shared = set.intersection(*(set(m["nll_by_depth"]) for m in members))
        nll = {
            d: sum(m["nll_by_depth"][d] for m in members) / len(members)
            for d in sorted(shared, key=int)
        }
        means.append({**members[0], "name": group, "nll_by_depth": nll, "seeds": len(members)})
    return means


def _paired_difference(
    r: dict[str, Any], ref: dict[str, Any], by_name: dict[tuple[str, int], dict[str, Any]]
) -> dict[str, float]:
    """Mean over the seeds both entries ran of r's NLL minus the reference's, per depth."""
    seeds = [s for (g, s) in by_name if g == r["name"] and (ref["name"], s) in by_name]
    pairs = [(by_name[r["name"], s], by_name[ref["name"], s]) for s in seeds]
    if not pairs:  # no seed both finished: nothing to draw on the right
        return {}
    shared = set.intersection(*(set(a["nll_by_depth"]) & set(b["nll_by_depth"]) for a, b in pairs))
    return {
        d: sum(a["nll_by_depth"][d] - b["nll_by_depth"][d] for a, b in pairs) / len(pairs)
        for d in shared
    }


def _depth_axis(ax, depths: list[int], train_max: int) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator([d for d in depths if d & (d - 1) == 0]))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter("{x:g}")
    ax.axvspan(depths[0], train_max, color="0.93", zorder=0)
    ax.set_xlabel("serving depth K (shaded: training depths)")
    ax.grid(True, which="major", color="0.85", lw=0.6)


def plot_nll_by_depth(
    rows: list[dict[str, Any]], reference: str | None, path: str | Path, over_seeds: bool = False
) -> Path:
    """Draw every row's `nll_by_depth` into `path` (PNG); with `over_seeds`, one line per entry
    (rows carry `group` and `seed`; `reference` names an entry)."""
    by_name = {(r["group"], r["seed"]): r for r in rows} if over_seeds else {}
    if over_seeds:
        rows = mean_over_seeds(rows)
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
            if over_seeds:
                differences = _paired_difference(r, ref, by_name)
            else:
                shared = set(r["nll_by_depth"]) & set(ref["nll_by_depth"])
                differences = {d: r["nll_by_depth"][d] - ref["nll_by_depth"][d] for d in shared}
            both = sorted(int(d) for d in differences)
            right.plot(both, [differences[str(d)] for d in both], **styles[r["name"]])
    for ax in (left, right):
        _depth_axis(ax, depths, train_max)
    mean = f" (mean over {max(r['seeds'] for r in rows)} seeds)" if over_seeds else ""
    left.set_ylabel("validation NLL (nats/token)")
    left.set_title("NLL by serving depth" + mean, fontsize=10)
    if ref is not None:
        right.axhline(0.0, color="black", lw=1.0)
        right.set_ylabel(f"NLL − NLL of {reference} (nats/token)")
        right.set_title(
            f"difference to {reference}"
            + (", same seed" if over_seeds else "")
            + ": below 0 is better",
            fontsize=10,
        )
    else:
        right.set_axis_off()
        why = "no reference run" if reference is None else f"{reference!r} not finished"
        right.text(0.5, 0.5, why, ha="center")
    fig.legend(loc="outside right center", fontsize=8, frameon=False)
    path = Path(path)
    save_figure(fig, path)
    return path
