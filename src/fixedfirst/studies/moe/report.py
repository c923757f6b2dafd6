"""The looped mixture-of-experts study's report: report.json (what it is computed from) and
report.md, remade from report.json alone (studies/report_files.py), and its figure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fixedfirst.studies.chains.analysis import PrimaryComparison
from fixedfirst.studies.depth_arms import analyse_arms, arms_report_numbers
from fixedfirst.studies.depth_tables import (
    band_table,
    percent,
    plot_bands,
    primary_table,
    versus_table,
)
from fixedfirst.studies.moe.router_analysis import analyse_router
from fixedfirst.studies.report_files import write_numbers_and_report

NUMBERS_FORMAT = "fixedfirst-moe-report"
RUN_FIELDS = ("arm", "schedule", "seed", "steps", "tokens", "flops", "switch_step", "wall_s")
FIGURE = "accuracy_by_depth.png"


def report_numbers(results: dict[str, Any]) -> dict[str, Any]:
    """What report.md is computed from: the settings, every run's cost, scores and router."""
    return arms_report_numbers(results, NUMBERS_FORMAT, RUN_FIELDS, ("scores", "router"))


def write_report(results: dict[str, Any], out: Path) -> None:
    """OUT/report.json and OUT/report.md made from it."""
    write_numbers_and_report(out, report_numbers(results), report_markdown)


def plot_figure(results: dict[str, Any], path: Path) -> None:
    labels = {r["arm"]: r["schedule"] for r in results["runs"].values()}
    depths = results["experiment"]["depths"]
    plot_bands(results["analysis"], depths, labels, results["chance"], path)


def _cost_lines(numbers: dict[str, Any]) -> list[str]:
    lines = [
        "| run | seed | steps | tokens | modeled FLOPs | wall-clock (s) |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in numbers["runs"].items():
        lines.append(
            f"| {name} | {r['seed']} | {r['steps']} | {r['tokens']:,} | {r['flops']:.4g} "
            f"| {r['wall_s']:.0f} |"
        )
    return lines


def _router_lines(router: dict[str, Any], labels: dict[str, str]) -> list[str]:
    lines = []
    for arm, layers in router.items():
        for layer, entry in layers.items():
            passes = list(entry["top_share"])
            lines += [
                "",
                f"{labels.get(arm, arm)}, loop layer {layer}:",
                "",
                "| pass | " + " | ".join(passes) + " |",
                "|" + "---|" * (len(passes) + 1),
                "| busiest expert's share | "
                + " | ".join(percent(entry["top_share"][p]) for p in passes)
                + " |",
                "| change from the pass before (TV) | - | "
                + " | ".join(percent(entry["pass_change"][p]) for p in passes[1:])
                + " |",
            ]
            if entry["switch_change"] is not None:
                lines.append(
                    "| change since the switch (TV) | "
                    + " | ".join(percent(entry["switch_change"][p]) for p in passes)
                    + " |"
                )
    return lines


def report_markdown(numbers: dict[str, Any]) -> str:
    """report.md from report.json's numbers (or results.json, which holds them all)."""
    e, task, model = numbers["experiment"], numbers["task"], numbers["model"]["options"]
    primary = [PrimaryComparison(**p) for p in e["primary"]]
    reference = numbers["reference"]
    a = analyse_arms(numbers["runs"], e["depths"], reference, e["compare_depths"], primary)
    router = analyse_router(numbers["runs"])
    labels = {r["arm"]: r["schedule"] for r in numbers["runs"].values()}
    seeds = ", ".join(map(str, a["seeds"]))
    family = a["exploratory"]
    wall = numbers.get("wall_clock_s") or {}
    workers = numbers.get("workers") or {}
    lines = [
        "# Fixed-first on a looped mixture-of-experts",
        "",
        f"transformers' Inkling2LoopForCausalLM (hidden {model['hidden_size']}, "
        f"{model['n_routed_experts']} experts, top-{model['num_experts_per_tok']}, layers "
        f"{model['loop_layer_index_start']}..{model['loop_layer_index_end'] - 1} of "
        f"{model['num_hidden_layers']} looped), random initialisation, on the chains task "
        f"({task['statements']} statements, values mod {task['values']}, training chains of "
        f"0..{task['max_ops']} operations, evaluation chains of {task['eval_ops']}). Every arm "
        f"trained with seeds {seeds} to {numbers['flop_budget']:.3g} modeled training FLOPs "
        f"(the compute model measured on the model), scored on {e['sequences']} evaluation "
        f"sequences per seed at {min(e['depths'])}..{max(e['depths'])} passes. Chance is "
        f"{100 * numbers['chance']:.1f}%. Produced by `fixedfirst moe --preset "
        f"{numbers['preset']}`"
        + (
            f" in {sum(wall.values()) / 60:.0f} minutes on {workers['processes']} process(es) of "
            f"{workers['threads_each']} thread(s)."
            if wall and workers
            else "."
        ),
        "",
        "Intervals are 95% t-intervals over seeds (an accuracy's cut at 0 and 100%); a "
        "comparison is the same-seed difference in points. The primary comparisons were named "
        "in the preset before the runs and are each decided by their own interval; every other "
        f"difference below is exploratory, corrected over all {family['size']} by Holm's method "
        f"({family['uncorrected']} have an interval off zero, {family['corrected']} keep a side "
        "after the correction).",
        "",
        "## Primary comparisons",
        "",
        primary_table(a),
        "",
        "## Accuracy by depth",
        "",
        f"![accuracy by depth]({FIGURE})",
        "",
    ]
    for role in a["bands"]:
        lines += [band_table(a, role, e["depths"], labels), ""]
    lines += [
        f"## Against {labels.get(reference, reference)}, at matched FLOPs",
        "",
        versus_table(a, labels),
        "",
        "## The router by pass",
        "",
        "Each loop layer's busiest expert's share of the tokens at each pass (an even spread is "
        f"{100 / model['n_routed_experts']:.0f}%), the total variation distance (TV) between "
        "consecutive passes' shares, and for fixed-first the TV between each pass's shares at "
        "the switch and at the end; expert labels differ between seeds, so only these "
        "label-free quantities are averaged.",
        *_router_lines(router, labels),
        "",
        "## Cost",
        "",
        *_cost_lines(numbers),
        "",
    ]
    return "\n".join(lines)
