"""The PNG of an inspection page: the same heat map, lines and marks, drawn by matplotlib from
the page's record, in strips of a fixed number of positions (a new strip for every sequence).
A long text is cut after MAX_STRIPS strips, and the title says so; the page has every position."""

from __future__ import annotations

from typing import Any

import numpy as np

MAX_STRIPS = 12
WIDTH = 15.0
"""Inches."""
RULE_COLOURS = {"kl": "#ff3b30", "entropy": "#ff9f0a", "state": "#ff2dc6", "argmax": "#00c7ff"}
"""The page's colours (page.html)."""


def _strips(record: dict[str, Any], per_strip: int) -> list[tuple[int, int, int]]:
    """(sequence, first position, end) of each strip, at most MAX_STRIPS."""
    strips = []
    for i, s in enumerate(record["sequences"]):
        for start in range(s["start"], s["start"] + s["length"], per_strip):
            strips.append((i, start, min(start + per_strip, s["start"] + s["length"])))
    return strips[:MAX_STRIPS]


def _column_labels(record: dict[str, Any], sequence: dict, first: int, end: int) -> list[str]:
    tokens, targets = record["tokens"], record["targets"]

    def shown(token: int | None) -> str:
        return "" if token is None else tokens[str(token)]

    if sequence["reads_as_text"]:
        return [shown(targets[p]) for p in range(first, end)]
    return [f"{shown(record['inputs'][p])}\n{shown(targets[p])}" for p in range(first, end)]


def _step_line(segment: tuple, values: list, colour: str, style: Any, label: str) -> None:
    """A depth per position as a step across each position's column; depths between the shown
    rows lie between them."""
    ax, depths, first, end = segment
    n = end - first
    edges = np.append(np.repeat(np.arange(n) - 0.5, 2)[1:], n - 0.5)
    rows = np.interp(np.asarray(values[first:end], dtype=float), depths, np.arange(len(depths)))
    from matplotlib import patheffects

    outline = (
        [patheffects.withStroke(linewidth=2.2, foreground="black")] if colour == "white" else []
    )
    ax.plot(
        edges, np.repeat(rows, 2), color=colour, ls=style, lw=1.1, label=label, path_effects=outline
    )


def fitted(line: str, fontsize: float, width: float) -> str:
    """`line` as matplotlib should draw it within `width` points: shortened in the middle
    (keeping both ends, which for a path are the root and the run) when longer, and with its
    dollar signs escaped, which matplotlib would otherwise read as mathematics."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    measure, font = TextToPath(), FontProperties(size=fontsize)

    def shown(text: str) -> str:
        return text.replace("$", r"\$")

    def fits(text: str) -> bool:
        return measure.get_text_width_height_descent(text, font, ismath=False)[0] <= width

    if fits(line):
        return shown(line)
    low, high = 0, len(line)  # the most characters kept around the ellipsis that still fit
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(_middle_cut(line, mid)) else (low, mid - 1)
    return shown(_middle_cut(line, low))


def _middle_cut(line: str, keep: int) -> str:
    head = (keep + 1) // 2
    return line[:head] + "\u2026" + line[len(line) - (keep - head) :]


def draw_inspection(record: dict[str, Any]):
    """A matplotlib figure of the record."""
    import matplotlib
    from matplotlib.figure import Figure

    depths = record["depths"]
    n_depths = len(depths)
    lengths = [len(t) for t in record["tokens"].values()]
    text_like = sum(n <= 2 for n in lengths) >= 0.9 * len(lengths)  # characters or bytes
    longest = max(s["length"] for s in record["sequences"])
    per_strip = min(longest, 100 if text_like else 48)
    strips = _strips(record, per_strip)
    heat = max(1.0, 0.09 * n_depths)  # inches of heat map per strip
    below = 0.45  # the column labels
    titled = 0.25 if len(record["sequences"]) > 1 else 0.0
    height = 1.0 + len(strips) * (heat + below + titled)
    fig = Figure(figsize=(WIDTH, height))
    grid = fig.add_gridspec(
        len(strips),
        1,
        hspace=(below + titled) / heat,
        top=1 - 0.9 / height,
        bottom=(below - 0.1) / height,
        left=0.05,
        right=0.93,
    )
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#e6e6e6")
    nll = np.array(record["nll"], dtype=float)  # None -> nan
    probability = np.exp(-nll)
    top = np.array(record["top"])
    targets = np.array([-1 if t is None else t for t in record["targets"]])
    answers = np.zeros(len(targets), dtype=bool)
    answers[[int(p) for p in record["answers"]]] = True
    window_starts = {start for start, _ in record["windows"]}
    image = None
    for k, (s, first, end) in enumerate(strips):
        ax = fig.add_subplot(grid[k])
        n = end - first
        image = ax.imshow(
            probability[:, first:end],
            cmap=cmap,
            vmin=0,
            vmax=1,
            aspect="auto",
            interpolation="nearest",
            extent=(-0.5, n - 0.5, n_depths - 0.5, -0.5),
        )
        right = (top[:, first:end] == targets[first:end]) & answers[first:end]
        ys, xs = np.nonzero(right)
        ax.scatter(xs, ys, s=1.5, c="black", marker="s", linewidths=0)
        segment = (ax, depths, first, end)
        _step_line(segment, record["stable_from"], "white", (0, (3, 2)), "top prediction settled")
        for rule in record["rules"]:
            colour = RULE_COLOURS.get(rule["name"], "black")
            _step_line(segment, rule["depth"], colour, "-", rule["label"])
        for p in range(first + 1, end):
            if p in window_starts:
                ax.axvline(p - first - 0.5, color="#d00", lw=1.5)
        sequence = record["sequences"][s]
        ax.set_xticks(np.arange(n), _column_labels(record, sequence, first, end))
        ax.tick_params(axis="x", labelsize=7, length=0)
        for label in ax.get_xticklabels():
            label.set_fontfamily("monospace")
            label.set_rotation(90 if len(label.get_text()) > 2 and text_like else 0)
        step = 1 if n_depths <= 20 else int(np.ceil(n_depths / 10))
        shown_rows = sorted({*range(0, n_depths, step), n_depths - 1})
        ax.set_yticks(shown_rows, [str(depths[i]) for i in shown_rows], fontsize=7)
        ax.set_xlim(-0.5, max(n, per_strip) - 0.5)
        ax.set_ylabel("depth", fontsize=7)
        if first == sequence["start"] and len(record["sequences"]) > 1:
            ax.set_title(fitted(sequence["title"], 8, 0.85 * 72 * WIDTH), fontsize=8, loc="left")
        if k == 0:
            handles, labels = ax.get_legend_handles_labels()
    total = sum(s["length"] for s in record["sequences"])
    shown = sum(end - first for _, first, end in strips)
    about = record["about"]
    cut = "" if shown == total else f" (the first {shown:,} of {total:,} positions)"
    lines = [
        f"{about['checkpoint']}: probability of the target at each serving depth{cut}",
        about["source"],  # a whole --prompt, however long: the page shows all of it
    ]
    fig.suptitle(
        "\n".join(fitted(line, 9, 0.96 * 72 * WIDTH) for line in lines),
        fontsize=9,
        y=1 - 0.08 / height,
        va="top",
    )
    fig.legend(
        handles,
        labels,
        loc="upper center",
        bbox_to_anchor=(0.5, 1 - 0.5 / height),
        fontsize=7,
        ncol=len(labels),
        frameon=False,
    )
    bar = fig.add_axes((0.945, (below - 0.1) / height, 0.01, min(0.5, 3.0 / height)))
    assert image is not None, "a record has at least one strip"
    fig.colorbar(image, cax=bar, label="p(target)")
    return fig
