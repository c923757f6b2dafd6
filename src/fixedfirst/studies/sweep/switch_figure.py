"""`switch_study.png`: the auto-switch study's arms, metric against modeled compute.

Left: each arm's mean over seeds of its headline metric (mean serving NLL, or the task's score
averaged over serving depths 1..16) against the modeled compute it spent (training plus an auto
rule's probes), one colour per K0. Fixed switch fractions are circles joined in order of the
fraction and labelled with it; auto rules are a star (plateau) or a diamond (depth-gap),
labelled with the fraction each seed's run switched at. Bars span the seeds (min to max) on both
axes, and each seed's run is a faint dot, so overlapping spreads are visible as overlap. Middle:
the same arms as differences to the best fixed fraction of their K0 run with the same seed: a
seed moves every arm alike (initialisation, data order), and on the left that shared shift can
hide differences between arms that every seed agrees on. Right: the metric at every serving
depth (mean over seeds); fixed fractions darker the later they switch, auto rules dashed.

Drawn on a bare `matplotlib.figure.Figure` (the Agg canvas writes the PNG), never through pyplot.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullLocator

from fixedfirst.files.writing import save_figure
from fixedfirst.studies.sweep.depth_figure import K0_COLORS
from fixedfirst.studies.sweep.switch_study import Arm, best_fixed, paired

RULE_MARKERS = {"plateau": "*", "depth-gap": "D"}


def _fraction(arm: Arm) -> float:
    """A fixed arm's switch fraction, by which fixed arms are drawn in order."""
    assert arm.switch_fraction is not None, "an auto arm has no fixed fraction"
    return arm.switch_fraction


def plot_switch_study(arms: list[Arm], metric: str, metric_name: str, path: str | Path) -> Path:
    k0s = sorted({a.k0 for a in arms})
    colour = {k0: K0_COLORS[i % len(K0_COLORS)] for i, k0 in enumerate(k0s)}
    lower = metric == "nll"
    fig = Figure(figsize=(19, 5.6), layout="constrained")
    left, middle, right = fig.subplots(1, 3)
    for k0 in k0s:
        fixed = sorted((a for a in arms if a.k0 == k0 and a.rule is None), key=_fraction)
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
        best = best_fixed(arms, k0, lower)
        if best is not None:
            _draw_paired(middle, [a for a in arms if a.k0 == k0], best, colour[k0])
        for arm in (a for a in arms if a.k0 == k0):
            depths = sorted(arm.by_depth)
            style = (
                {"ls": "-", "lw": 1.3, "alpha": 0.25 + 0.75 * (arm.switch_fraction or 0.0)}
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
    # A task's metric name can be a sentence: its words before a parenthesis label the axis.
    short = metric_name.split(" (")[0]
    left.set_ylabel(f"{short} (mean over seeds)")
    better = "lower" if metric == "nll" else "higher"
    left.set_title(f"{short} against compute ({better} is better)", fontsize=10)
    left.grid(True, color="0.88", lw=0.6)
    left.legend(fontsize=8, frameon=False, loc="best")
    middle.axhline(0.0, color="black", lw=0.8)
    middle.set_xlabel("modeled compute (training FLOPs + probes)")
    middle.set_ylabel("minus the best fixed fraction's, same seed")
    middle.set_title("difference to the best fixed fraction of the same K0 and seed", fontsize=10)
    middle.grid(True, color="0.88", lw=0.6)
    depths = sorted({d for a in arms for d in a.by_depth})
    right.set_xscale("log", base=2)
    right.xaxis.set_major_locator(FixedLocator([d for d in depths if d & (d - 1) == 0]))
    right.xaxis.set_minor_locator(NullLocator())
    right.xaxis.set_major_formatter("{x:g}")
    right.set_xlabel("serving depth K")
    right.set_ylabel("at each serving depth (mean over seeds)")
    right.set_title("by serving depth (solid: fixed, darker = later switch)", fontsize=10)
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
    _label(ax, arm, arm.compute, arm.mean, colour)


def _label(ax, arm: Arm, x: float, y: float, colour: str) -> None:
    """A fixed arm's fraction above its point, an auto arm's switch fractions below (an auto
    run that reached its ceiling sits on the fixed fraction of the same value)."""
    text = (
        f"{arm.switch_fraction:g}"
        if arm.rule is None
        else "@" + "/".join(f"{f:.2f}" for f in arm.realised_fractions)
    )
    ax.annotate(
        text,
        (x, y),
        xytext=(5, 4) if arm.rule is None else (5, -11),
        textcoords="offset points",
        fontsize=7,
        color=colour,
    )


def _draw_paired(ax, arms: list[Arm], best: Arm, colour: str) -> None:
    """Each arm's same-seed differences to `best`: seeds as faint dots, their mean as the
    marker; fixed fractions joined in order of the fraction."""
    fixed = sorted((a for a in arms if a.rule is None and paired(a, best)), key=_fraction)
    ax.plot(
        [a.compute for a in fixed],
        [sum(paired(a, best)) / len(paired(a, best)) for a in fixed],
        color=colour,
        lw=1.0,
        alpha=0.6,
    )
    for arm in arms:
        diffs = paired(arm, best)
        if not diffs:
            continue
        ax.scatter(arm.computes[: len(diffs)], diffs, color=colour, alpha=0.35, s=12, lw=0)
        mean = sum(diffs) / len(diffs)
        marker = "o" if arm.rule is None else RULE_MARKERS.get(arm.rule, "x")
        ax.plot(
            [arm.compute],
            [mean],
            marker=marker,
            color=colour,
            ms=9 if arm.rule is not None else 5,
            mfc="white" if arm.rule is not None else colour,
            ls="none",
        )
        _label(ax, arm, arm.compute, mean, colour)
