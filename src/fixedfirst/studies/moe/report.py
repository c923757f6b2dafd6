"""The looped mixture-of-experts study's report: report.json (what it is computed from) and
report.md, remade from report.json alone (kit/report_files.py), and its figure.
"""

from __future__ import annotations

from typing import Any

from fixedfirst.studies.kit.depth_tables import (
    DepthReport,
    accuracy_section,
    analysed,
    percent,
    primary_table,
    versus_table,
)
from fixedfirst.studies.kit.paragraphs import corrected_over, holm_reach, produced_by, table
from fixedfirst.studies.moe.router_analysis import analyse_router

RUN_FIELDS = ("arm", "schedule", "seed", "steps", "tokens", "flops", "switch_step", "wall_s")


def labels(numbers: dict[str, Any]) -> dict[str, str]:
    return {r["arm"]: r["schedule"] for r in numbers["runs"].values()}


def _router_lines(router: dict[str, Any], labels: dict[str, str]) -> list[str]:
    lines = []
    for arm, layers in router.items():
        for layer, entry in layers.items():
            passes = list(entry["top_share"])
            rows = [
                ["busiest expert's share", *(percent(entry["top_share"][p]) for p in passes)],
                [
                    "change from the pass before (TV)",
                    "-",
                    *(percent(entry["pass_change"][p]) for p in passes[1:]),
                ],
            ]
            if entry["switch_change"] is not None:
                switch = entry["switch_change"]
                rows.append(["change since the switch (TV)", *(percent(switch[p]) for p in passes)])
            title = f"{labels.get(arm, arm)}, loop layer {layer}:"
            lines += ["", title, "", *table(["pass", *passes], rows, compact=True)]
    return lines


def report_markdown(numbers: dict[str, Any]) -> str:
    """report.md from report.json's numbers (or results.json, which holds them all)."""
    e, task, model = numbers["experiment"], numbers["task"], numbers["model"]["options"]
    reference = numbers["reference"]
    a = analysed(numbers, e["compare_depths"])
    router = analyse_router(numbers["runs"])
    names = labels(numbers)
    costs = [
        [name, r["seed"], r["steps"], f"{r['tokens']:,}", f"{r['flops']:.4g}", f"{r['wall_s']:.0f}"]
        for name, r in numbers["runs"].items()
    ]
    lines = [
        "# Fixed-first on a looped mixture-of-experts",
        "",
        f"transformers' Inkling2LoopForCausalLM (hidden {model['hidden_size']}, "
        f"{model['n_routed_experts']} experts, top-{model['num_experts_per_tok']}, layers "
        f"{model['loop_layer_index_start']}..{model['loop_layer_index_end'] - 1} of "
        f"{model['num_hidden_layers']} looped), random initialisation, on the chains task "
        f"({task['statements']} statements, values mod {task['values']}, training chains of "
        f"0..{task['max_ops']} operations, evaluation chains of {task['eval_ops']}). Every arm "
        f"trained with seeds {', '.join(map(str, a['seeds']))} to {numbers['flop_budget']:.3g} "
        "modeled training FLOPs (the compute model measured on the model), scored on "
        f"{e['sequences']} evaluation sequences per seed at {min(e['depths'])}.."
        f"{max(e['depths'])} passes. Chance is {100 * numbers['chance']:.1f}%. "
        + produced_by(f"moe --preset {numbers['preset']}", numbers),
        "",
        "Intervals are 95% t-intervals over seeds (an accuracy's cut at 0 and 100%); a "
        "comparison is the same-seed difference in points. The primary comparisons were named "
        "in the preset before the runs and are each decided by their own interval; every other "
        f"difference below is exploratory, {corrected_over(a['exploratory'])}. "
        + holm_reach(a["exploratory"], lambda x: f"{100 * x:.1f} points"),
        "",
        "## Primary comparisons",
        "",
        primary_table(a),
        "",
        *accuracy_section(a, e["depths"], names),
        f"## Against {names.get(reference, reference)}, at matched FLOPs",
        "",
        versus_table(a, names),
        "",
        "## The router by pass",
        "",
        "Each loop layer's busiest expert's share of the tokens at each pass (an even spread is "
        f"{100 / model['n_routed_experts']:.0f}%), the total variation distance (TV) between "
        "consecutive passes' shares, and for fixed-first the TV between each pass's shares at "
        "the switch and at the end; expert labels differ between seeds, so only these "
        "label-free quantities are averaged.",
        *_router_lines(router, names),
        "",
        "## Cost",
        "",
        *table(["run", "seed", "steps", "tokens", "modeled FLOPs", "wall-clock (s)"], costs, True),
        "",
    ]
    return "\n".join(lines)


REPORT = DepthReport(
    "fixedfirst-moe-report", RUN_FIELDS, ("scores", "router"), report_markdown, labels
)
"""report.json, report.md and the figure: what the study writes beside its results."""
