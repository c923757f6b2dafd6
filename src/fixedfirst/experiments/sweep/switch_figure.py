"""`switch_study.png`: the auto-switch study's arms, metric against modeled compute.

Left: each arm's mean over seeds of its headline metric (mean serving NLL, or the task's score
averaged over serving depths 1..16) against the modeled compute it spent (training plus an auto
rule's probes), one colour per K0. Fixed switch fractions are circles joined in order of the
fraction and labelled with it; auto rules are a star (plateau) or a diamond (depth-gap),
labelled with the fraction each seed's run switched at. Bars span the seeds (min to max) on both
axes, and each seed's run is a faint dot, so overlapping spreads are visible as overlap. Right:
the metric at every serving depth (mean over seeds), the same colours and markers, which shows
where along the depths two arms differ.

Drawn on a bare `matplotlib.figure.Figure` (the Agg canvas writes the PNG), never through pyplot.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullLocator

from fixedfirst.experiments.sweep.depth_figure import K0_COLORS
from fixedfirst.experiments.sweep.switch_study import Arm
from fixedfirst.files import save_figure

RULE_MARKERS = {"plateau": "*", "depth-gap": "D"}


def plot_switch_study(arms: list[Arm], metric: str, metric_name: str, path: str | Path) -> Path:
    k0s = sorted({a.k0 for a in arms})
    colour = {k0: K0_COLORS[i % len(K0_COLORS)] for i, k0 in enumerate(k0s)}
    fig = Figure(figsize=(13, 5.4), layout="constrained")
    left, right = fig.subplots(1, 2)
    for k0 in k0s:
        fixed = sorted((a for a in arms if a.k0 == k0 and a.rule is None), key=lambda a: a.switch)
        if fixed:
            left.plot(
                [a.compute for a in fixed],
                [a.mean for a in fixed],
                color=colour[k0],
                lw=1.0,
                alpha=0.6,
                label=f"K0 = {k0}, fixed fractions",
            )
        for arm in (a for a in arms if a.k0 == k0):
            _draw_arm(left, arm, colour[k0])
        for arm in (a for a in arms if a.k0 == k0):
            depths = sorted(arm.by_depth)
            style = (
                {"ls": "-", "lw": 0.8 + 1.6 * (arm.switch or 0.0), "alpha": 0.8}
                if arm.rule is None
                else {"ls": "--", "lw": 1.6, "marker": RULE_MARKERS.get(arm.rule, "x"), "ms": 5}
            )
            right.plot(
                depths,
                [arm.by_depth[d] for d in depths],
                color=colour[k0],
                label=f"K0={k0} {arm.label}",
                **style,
            )
    left.set_xlabel("modeled compute (training FLOPs + probes)")
    left.set_ylabel(f"{metric_name} (mean over seeds)")
    better = "lower" if metric == "nll" else "higher"
    left.set_title(f"{metric_name} against compute ({better} is better)", fontsize=10)
    left.grid(True, color="0.88", lw=0.6)
    left.legend(fontsize=8, frameon=False, loc="best")
    depths = sorted({d for a in arms for d in a.by_depth})
    right.set_xscale("log", base=2)
    right.xaxis.set_major_locator(FixedLocator([d for d in depths if d & (d - 1) == 0]))
    right.xaxis.set_minor_locator(NullLocator())
    right.xaxis.set_major_formatter("{x:g}")
    right.set_xlabel("serving depth K")
    right.set_ylabel("at each serving depth (mean over seeds)")
    right.set_title("by serving depth (solid: fixed, thicker = later switch)", fontsize=10)
    right.grid(True, color="0.88", lw=0.6)
    fig.legend(*right.get_legend_handles_labels(), loc="outside right center", fontsize=7)
    path = Path(path)
    save_figure(fig, path)
    return path


def _draw_arm(ax, arm: Arm, colour: str) -> None:
    """One arm: its seeds as faint dots, its mean with seed-range bars, a label."""
    ax.scatter(arm.computes, arm.values, color=colour, alpha=0.3, s=12, lw=0)
    lo_x, hi_x = min(arm.computes), max(arm.computes)
    lo_y, hi_y = min(arm.values), max(arm.values)
    marker = "o" if arm.rule is None else RULE_MARKERS.get(arm.rule, "x")
    ax.errorbar(
        [arm.compute],
        [arm.mean],
        xerr=[[arm.compute - lo_x], [hi_x - arm.compute]],
        yerr=[[arm.mean - lo_y], [hi_y - arm.mean]],
        color=colour,
        marker=marker,
        ms=9 if arm.rule is not None else 5,
        mfc="white" if arm.rule is not None else colour,
        lw=0.9,
        capsize=2,
        label=f"K0 = {arm.k0}, {arm.label}" if arm.rule is not None else None,
    )
    text = (
        f"{arm.switch:g}"
        if arm.rule is None
        else "@" + "/".join(f"{f:.2f}" for f in arm.switched_at)
    )
    ax.annotate(
        text,
        (arm.compute, arm.mean),
        xytext=(5, 4),
        textcoords="offset points",
        fontsize=7,
        color=colour,
    )
