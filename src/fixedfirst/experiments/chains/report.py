"""report.md of the chains experiment: findings computed from the numbers, then the tables.

Every sentence is produced from results.json (`analysis.py`): which schedules gain from serving
depth and by how much, with every seed's paired interval; which extrapolate past the training
range and how far; how the schedules rank at matched FLOPs, said as a ranking only where the
seeds do not overlap; what the KL exit rule spends per difficulty. Nothing is canned, so a run
that disagrees with the paper says so.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from fixedfirst.files import write_text_atomic

TABLE_DEPTHS = (1, 2, 4, 8, 16, 32, 64)
DEPTH_MATTERS = 0.40
"""The issue's bar: uniform's accuracy at depth 16 at least 40 points above depth 1."""


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _interval(i: dict[str, Any]) -> str:
    return f"{100 * i['mean']:+.1f} [{100 * i['low']:+.1f}, {100 * i['high']:+.1f}]"


def _label(results: dict[str, Any], schedule: str) -> str:
    return next(r["label"] for r in results["runs"].values() if r["schedule"] == schedule)


def _seeds_text(per_seed: dict[str, dict[str, Any]]) -> str:
    return "; ".join(f"seed {s}: {_interval(i)}" for s, i in per_seed.items())


def findings(results: dict[str, Any]) -> list[str]:
    a = results["analysis"]
    hard, k16, deepest = a["hard_band"], a["training_depth"], a["deepest_depth"]
    out = []
    for schedule, gain in a["depth_gain"].items():
        lows = [i["low"] for i in gain["seeds"].values()]
        means = [i["mean"] for i in gain["seeds"].values()]
        verdict = (
            "depth decides the answer"
            if min(lows) > 0
            else "the gain is not distinguishable from zero in every seed"
        )
        bar = ""
        if schedule == "uniform-1-16":
            met = min(means) >= DEPTH_MATTERS
            bar = (
                f" The target (at least {100 * DEPTH_MATTERS:.0f} points for uniform training) is "
                + ("met in every seed." if met else "not met in every seed.")
            )
        out.append(
            f"{_label(results, schedule)}: at difficulty {hard} (the harder half of the training "
            f"range) accuracy at K={k16} minus K=1 is {_seeds_text(gain['seeds'])} points "
            f"(paired 95% intervals over evaluation sequences): {verdict}.{bar}"
        )
    gaining = []
    for schedule, bands in a["extrapolation"].items():
        for band, per_seed in bands.items():
            if all(i["low"] > 0 for i in per_seed.values()):
                gaining.append(f"{_label(results, schedule)} on {band} ({_seeds_text(per_seed)})")
    if gaining:
        out.append(
            f"Serving deeper than trained pays beyond the training range: accuracy at "
            f"K={deepest} minus K={k16}, every seed's interval above zero, for "
            + "; ".join(gaining)
            + "."
        )
    else:
        out.append(
            f"No schedule gains from K={k16} to K={deepest} beyond the training range in every "
            "seed."
        )
    solved = []
    for schedule, s in a["solved"].items():
        low, high = s["up_to_training_depth"], s["beyond_training_depth"]
        solved.append(
            f"{_label(results, schedule)} "
            f"{'none' if low is None else f'd = {low}'} at K <= {k16}, "
            f"{'none' if high is None else f'd = {high}'} at K > {k16}"
        )
    out.append(
        f"Beyond the training range (which ends at d = {results['task']['max_ops']}), the largest "
        f"difficulty up to which every difficulty has seed-mean accuracy >= "
        f"{100 * a['solved_threshold']:.0f}% at the best serving depth: " + "; ".join(solved) + "."
    )
    for band, depth in (
        (hard, k16),
        *((b["label"], deepest) for b in a["bands"] if not b["in_range"]),
    ):
        cells = {s: a["band_accuracy"][s][band][str(depth)] for s in a["schedules"]}
        order = sorted(cells, key=lambda s: cells[s]["mean"], reverse=True)
        text = ", ".join(
            f"{_label(results, s)} {_pct(cells[s]['mean'])} ({_pct(cells[s]['min'])}-"
            f"{_pct(cells[s]['max'])})"
            for s in order
        )
        separated = [
            f"{_label(results, x)} > {_label(results, y)}"
            for x, y in itertools.pairwise(order)
            if cells[x]["min"] > cells[y]["max"]
        ]
        out.append(
            f"At matched FLOPs, difficulty {band} at K={depth}: {text} (% mean of the seeds, "
            "their range in brackets); "
            + (
                "one seed cannot separate schedules"
                if len(results["experiment"]["seeds"]) < 2
                else "the seeds separate only " + ", ".join(separated)
                if separated
                else "no neighbours in this order are separated by their seeds"
            )
            + "."
        )
    depth_text = []
    for schedule, exit_rule in a["kl_exit"].items():
        bands = exit_rule["bands"]
        depth_text.append(
            f"{_label(results, schedule)} "
            + " / ".join(f"{bands[b['label']]['mean_depth']['mean']:.1f}" for b in a["bands"])
        )
    first = next(iter(a["kl_exit"].values()))
    out.append(
        f"KL exit (threshold {first['threshold']:g}, at most {first['max_depth']} iterations) "
        "uses on average, for difficulty "
        + " / ".join(b["label"] for b in a["bands"])
        + ", these many core iterations: "
        + "; ".join(depth_text)
        + "."
    )
    return out


def _runs_table(results: dict[str, Any]) -> list[str]:
    budget = results["flop_budget"]
    lines = [
        "| run | schedule | seed | steps | tokens | modeled FLOPs | of the budget | wall-clock s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in results["runs"].items():
        lines.append(
            f"| {name} | {r['description']} | {r['seed']} | {r['steps']} | {r['tokens']:,} | "
            f"{r['flops']:.4e} | {100 * r['flops'] / budget:.2f}% | {r['wall_s']:.0f} |"
        )
    return lines


def accuracy_table(results: dict[str, Any], depths: tuple[int, ...] = TABLE_DEPTHS) -> list[str]:
    a = results["analysis"]
    shown = [d for d in depths if d in results["experiment"]["depths"]]
    bands = a["bands"]
    lines = [
        "| schedule | K | " + " | ".join(f"d {b['label']}" for b in bands) + " |",
        "| --- | --- |" + " --- |" * len(bands),
    ]
    for schedule in a["schedules"]:
        for depth in shown:
            cells = []
            for b in bands:
                c = a["band_accuracy"][schedule][b["label"]][str(depth)]
                cells.append(f"{_pct(c['mean'])} ({_pct(c['min'])}-{_pct(c['max'])})")
            lines.append(f"| {_label(results, schedule)} | {depth} | " + " | ".join(cells) + " |")
    return lines


def _exit_table(results: dict[str, Any]) -> list[str]:
    a = results["analysis"]
    bands = a["bands"]
    lines = [
        "| schedule | " + " | ".join(f"d {b['label']}: acc % / depth" for b in bands) + " |",
        "| --- |" + " --- |" * len(bands),
    ]
    for schedule, exit_rule in a["kl_exit"].items():
        cells = [
            f"{_pct(exit_rule['bands'][b['label']]['accuracy']['mean'])} / "
            f"{exit_rule['bands'][b['label']]['mean_depth']['mean']:.1f}"
            for b in bands
        ]
        lines.append(f"| {_label(results, schedule)} | " + " | ".join(cells) + " |")
    return lines


def write_report(results: dict[str, Any], path: Path) -> None:
    task = results["task"]
    seeds = results["experiment"]["seeds"]
    lines = [
        "# Depth that matters: the chains task",
        "",
        f"Every schedule trained with seeds {', '.join(map(str, seeds))} to the same budget of "
        f"{results['flop_budget']:.3g} modeled training FLOPs (each run ends within one step "
        f"below it). Sequences of {task['statements']} statements, values mod {task['values']}, "
        f"training chains of 0..{task['max_ops']} operations; scored on "
        f"{results['experiment']['sequences']} evaluation sequences, each with one chain of "
        f"{task['eval_ops']} operations (one label of every difficulty 0..{task['eval_ops']}). "
        f"Chance is {100 * results['chance']:.1f}%. Produced by `fixedfirst chains --preset "
        f"{results['preset']}`.",
        "",
        "## What the numbers show",
        "",
        *[f"- {s}" for s in findings(results)],
        "",
        "## Accuracy by serving depth and difficulty band",
        "",
        "Exact-match accuracy (%) at serving depth K, mean of the seeds (their range).",
        "",
        *accuracy_table(results),
        "",
        "## KL exit",
        "",
        *_exit_table(results),
        "",
        "## Runs",
        "",
        *_runs_table(results),
        "",
    ]
    write_text_atomic(path, "\n".join(lines))
