"""Figure 3: a fixed-first run's training loss around the switch, and validation NLL by depth.

Top: the training loss of every logged step over the whole run (thin, light) and a trailing mean
over a few logged steps (dark), on a logarithmic loss axis so the first steps (near ln V) and the
end both show. Middle: the same curves zoomed to the switch (15% of the run's tokens either side),
where the spike is. A trailing mean never moves post-switch losses to before the switch, so the
spike starts exactly at the switch line; the window is 2% of the logged steps but at least
MIN_WINDOW of them, short enough to keep the spike's height. Before the switch the loss is
measured at K0; after it, at the depth each step drew, which is why the raw line turns jagged.
Bottom: validation NLL at a few serving depths at every evaluation the run logged (`eval.every`),
showing how far the deep serving depths lag while training at K0 and how fast they recover.

Drawn on a bare `matplotlib.figure.Figure` (the Agg canvas writes the PNG), never through pyplot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter, FormatStrFormatter

from fixedfirst.compute.run_cost import run_plan
from fixedfirst.errors import UserError
from fixedfirst.files.writing import save_figure
from fixedfirst.runs.directory import RunDir
from fixedfirst.schedules import describe
from fixedfirst.train.metrics import read_metrics

PREFERRED_DEPTHS = (1, 4, 16)
SMOOTHING_FRACTION = 0.02
MIN_WINDOW = 4
ZOOM_FRACTION = 0.15
DEPTH_STYLES = (
    {"color": "tab:blue", "marker": "o", "ls": "-"},
    {"color": "tab:orange", "marker": "s", "ls": "--"},
    {"color": "tab:green", "marker": "^", "ls": "-."},
    {"color": "tab:red", "marker": "D", "ls": ":"},
    {"color": "tab:purple", "marker": "v", "ls": "-"},
)
"""Distinct in colour, marker and dashes: nearby depths often lie on top of each other."""


def trailing_mean(values: list[float], window: int) -> list[float]:
    """out[i] = mean(values[max(0, i - window + 1) : i + 1])."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def shown_depths(available: list[int]) -> list[int]:
    """Depths 1, 4, 16 where evaluated; otherwise the smallest, a middle and the largest."""
    preferred = [d for d in PREFERRED_DEPTHS if d in available]
    if len(preferred) >= 2:
        return preferred
    if len(available) <= 3:
        return available
    return [available[0], available[len(available) // 2], available[-1]]


def figure3_data(run: str | Path) -> dict[str, Any]:
    """What the figure shows, read from the run directory."""
    run_dir = RunDir(run)
    config = run_dir.saved_config()
    if config.schedule.kind != "fixed-first":
        raise UserError(
            f"{run_dir.path} trained {describe(config.schedule)}; Figure 3 needs a fixed-first run"
        )
    if not run_dir.metrics_path.is_file():
        raise UserError(f"{run_dir.path} has no metrics.jsonl yet")
    train = read_metrics(run_dir.metrics_path, "train")
    evals = read_metrics(run_dir.metrics_path, "eval")
    if len(train) < 2:
        raise UserError(f"{run_dir.path}: fewer than two logged training steps to draw")
    plan = run_plan(config)
    total_steps, switch_step = plan.total_steps, plan.switch_step
    if config.schedule.auto_switch:  # decided by the run: its `switch` record says where
        decided = read_metrics(run_dir.metrics_path, "switch")
        if not decided:
            raise UserError(f"{run_dir.path}: its auto switch has not switched yet")
        switch_step = int(decided[0]["step"])
    assert switch_step is not None  # a fixed fraction always has one
    return {
        "schedule": describe(config.schedule),
        "k0": config.schedule.k0,
        "finish": (
            f"uniform {config.schedule.k_min}..{config.schedule.k_max}"
            if config.schedule.finish == "uniform"
            else f"Poisson-lognormal (mean {config.schedule.mean_depth:g})"
        ),
        "switch_fraction": (
            round(switch_step / total_steps, 3)
            if config.schedule.auto_switch
            else config.schedule.switch_fraction
        ),
        "switch_tokens": switch_step * config.train.tokens_per_step,
        "log_every": config.train.log_every,
        "train": [(r["tokens"], float(r["loss"])) for r in train],
        "evals": [(r["tokens"], r["nll_by_depth"]) for r in evals],
    }


def _window_label(window: int, log_every: int) -> str:
    every = "every step" if log_every == 1 else f"one every {log_every} steps"
    return f"trailing mean of {window} logged steps ({every})"


def plot_figure3(run: str | Path, path: str | Path) -> Path:
    """Draw Figure 3 of the fixed-first run in `run` into `path` (PNG)."""
    data = figure3_data(run)
    tokens = [t for t, _ in data["train"]]
    losses = [loss for _, loss in data["train"]]
    window = min(len(losses), max(MIN_WINDOW, round(SMOOTHING_FRACTION * len(losses))))
    smooth = trailing_mean(losses, window)
    switch = data["switch_tokens"]
    fig = Figure(figsize=(9, 10), layout="constrained")
    whole, zoom, bottom = fig.subplots(3, 1, height_ratios=[1, 1.2, 1.2])

    for ax in (whole, zoom):
        ax.plot(tokens, losses, color="0.7", lw=0.7, label="loss of each logged step")
        ax.plot(tokens, smooth, color="black", lw=1.5,
                label=_window_label(window, data["log_every"]))  # fmt: skip
        ax.set_ylabel("training loss (nats/token)")
    whole.set_yscale("log")
    whole.yaxis.set_major_formatter(FormatStrFormatter("%.2g"))
    whole.yaxis.set_minor_formatter(FormatStrFormatter("%.2g"))
    whole.set_title(f"Figure 3: {data['schedule']}", fontsize=11)
    # The zoom: the switch and ZOOM_FRACTION of the run's tokens either side of it, with the
    # loss axis fitted to what lies in that window.
    half = ZOOM_FRACTION * tokens[-1]
    low, high = max(tokens[0], switch - half), min(tokens[-1], switch + half)
    inside = [v for t, v in zip(tokens, losses, strict=True) if low <= t <= high]
    if len(inside) >= 2 and high > low:
        spread = max(inside) - min(inside) or 1e-3
        zoom.set_xlim(low, high)
        zoom.set_ylim(min(inside) - 0.05 * spread, max(inside) + 0.15 * spread)
    zoom.set_title(f"around the switch (±{ZOOM_FRACTION:.0%} of the run's tokens)", fontsize=10)

    available = sorted({int(d) for _, nll in data["evals"] for d in nll})
    for style, depth in zip(DEPTH_STYLES, shown_depths(available), strict=False):
        points = [(t, nll[str(depth)]) for t, nll in data["evals"] if str(depth) in nll]
        if points:
            xs, ys = zip(*points, strict=True)
            bottom.plot(xs, ys, ms=4, lw=1.4, label=f"serving depth K={depth}", **style)
    bottom.set_ylabel("validation NLL (nats/token)")
    bottom.set_xlabel("training tokens")
    if not data["evals"]:
        bottom.text(0.5, 0.5, "no evaluations logged (set eval.every)", ha="center",
                    transform=bottom.transAxes)  # fmt: skip

    for ax in (whole, zoom, bottom):
        ax.axvline(switch, color="tab:red", ls="--", lw=1.2)
        ax.grid(True, color="0.88", lw=0.6)
        ax.xaxis.set_major_formatter(EngFormatter())
    whole.annotate(
        f"switch: K={data['k0']} → {data['finish']}\n"
        f"({100 * data['switch_fraction']:g}% of tokens)",
        (switch, 1.0),
        xycoords=("data", "axes fraction"),
        xytext=(-6, -6),
        textcoords="offset points",
        ha="right",
        va="top",
        fontsize=9,
        color="tab:red",
    )
    whole.legend(loc="lower left", fontsize=8, frameon=False)  # the loss falls: room low left
    for ax in (zoom, bottom):
        ax.legend(loc="best", fontsize=8, frameon=False)
    path = Path(path)
    save_figure(fig, path)
    return path
