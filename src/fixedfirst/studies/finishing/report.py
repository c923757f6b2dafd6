"""The finishing study's report: report.json (what it is computed from) and report.md, remade
from report.json alone (kit/report_files.py), and its figure.

Besides the tables by band and depth, report.md has the table the guide quotes
(docs/guides/any-loop.md, "make your fixed-depth looped model depth-flexible"): for each
finishing rate and length, the finishing tokens spent and the hard band's accuracy at one pass,
at the base's depth K and at k_max, and the near band's at the deepest depth, each against the
base with its interval.
"""

from __future__ import annotations

from typing import Any

from fixedfirst.studies.kit.depth_tables import (
    DepthReport,
    accuracy_section,
    analysed,
    percent,
    points,
    primary_table,
    versus_table,
)
from fixedfirst.studies.kit.paragraphs import corrected_over, holm_reach, produced_by, table

RUN_FIELDS = (
    "arm",
    "seed",
    "rate",
    "fraction",
    "steps",
    "tokens",
    "finishing_tokens",
    "flops",
    "wall_s",
)


def labels(numbers: dict[str, Any]) -> dict[str, str]:
    e = numbers["experiment"]
    out = {numbers["reference"]: f"fixed K={e['depth']} (no finishing)"}
    for rate in e["rates"]:
        for fraction in e["fractions"]:
            out[f"{rate}-{fraction:g}"] = f"{rate}, {100 * fraction:g}% of the tokens"
    for fraction in e.get("controls", []):  # results written before the control arm: none
        out[f"continued-{fraction:g}"] = f"continued at K={e['depth']}, {100 * fraction:g}%"
    for fraction in e.get("lowrank", []):  # results written before the low-rank arm: none
        out[f"lowrank-{fraction:g}"] = f"low-rank, constant, {100 * fraction:g}%"
    return out


def guide_table(numbers: dict[str, Any], a: dict[str, Any]) -> str:
    """Finishing tokens against what they buy: hard-band accuracy at 1, K and k_max, near-band
    at the deepest depth, each finish minus the base (same seed), with its 95% interval."""
    e = numbers["experiment"]
    cells = [("hard", 1), ("hard", e["depth"]), ("hard", e["k_max"]), ("near", max(e["depths"]))]
    cells = [(role, d) for role, d in cells if role in a["bands"] and d in e["depths"]]
    tokens = {
        arm: sorted({r["finishing_tokens"] for r in numbers["runs"].values() if r["arm"] == arm})
        for arm in a["arms"]
    }
    names = labels(numbers)
    rows = []
    for arm in a["arms"]:
        low, high = tokens[arm][0], tokens[arm][-1]
        shown = f"{low:,}" if low == high else f"{low:,}-{high:,}"
        row = [percent(a["band_accuracy"][arm][r][str(d)]) for r, d in cells]
        if arm != a["reference"]:
            row = [
                f"{c} ({points(_difference(a, arm, r, d))})"
                for c, (r, d) in zip(row, cells, strict=True)
            ]
        rows.append([names.get(arm, arm), shown, *row])
    head = ["finishing", "tokens", *(f"{r} K={d}" for r, d in cells)]
    return "\n".join(table(head, rows, compact=True))


def rates_sentence(e: dict[str, Any]) -> str:
    """The finishing rates the preset trains at (both, in the presets before the stand-in's)."""
    said = {
        "constant": "`constant` at the base's final rate",
        "rewarm": f"`rewarm` linear to {100 * e['rewarm_peak']:g}% of the peak over "
        f"{100 * e['rewarm_warmup']:g}% of the finishing steps, then a cosine decay to the final "
        "rate",
    }
    if len(e["rates"]) == 1:
        return f"at the finishing rate {said[e['rates'][0]]}. "
    return f"at each finishing rate: {', '.join(said[r] for r in e['rates'])}. "


def control_sentence(e: dict[str, Any]) -> str:
    """What the control and low-rank arms are, where the preset has any (a finish trains more
    tokens than its base; the control trains as many at the base's own depth)."""
    controls = sorted(e.get("controls", []))
    lowrank = sorted(e.get("lowrank", []))
    said = ""
    if controls:
        shares = ", ".join(f"{100 * f:g}%" for f in controls)
        said += (
            f"The control (`continued`) trains the base on at its own depth K = {e['depth']}, at "
            f"its final rate held constant, for as many tokens as the finish of {shares}. "
        )
    if lowrank:
        shares = ", ".join(f"{100 * f:g}%" for f in lowrank)
        said += (
            f"The low-rank finish (`lowrank`) of {shares} trains low-rank adapters alone (the "
            "base's weights frozen) at the constant rate, as a run of its own from the base's "
            "final weights, whose data stream starts again at the beginning of the base's. "
        )
    return said


def _difference(a: dict[str, Any], arm: str, role: str, depth: int) -> dict[str, Any] | None:
    return a["versus_reference"].get(arm, {}).get(f"{role}@{depth}")


def report_markdown(numbers: dict[str, Any]) -> str:
    """report.md from report.json's numbers (or results.json, which holds them all)."""
    e, task = numbers["experiment"], numbers["task"]
    depths = sorted({*e["compare_depths"], e["depth"], e["k_max"], 1, max(e["depths"])})
    a = analysed(numbers, [d for d in depths if d in e["depths"]])
    names = labels(numbers)
    model = numbers["model"]
    described = (
        f"transformers' {model['architecture']}"
        if model.get("kind") == "transformers"
        else f"fixedfirst's looped transformer (d_model {model['d_model']}, {model['n_core']} "
        "core layers)"
    )
    lines = [
        "# Finishing a model trained at one depth",
        "",
        f"{described}, trained at a fixed depth K = {e['depth']} with seeds "
        f"{', '.join(map(str, a['seeds']))} to {numbers['flop_budget']:.3g} modeled training "
        f"FLOPs on the chains task ({task['statements']} statements, values mod "
        f"{task['values']}, training chains of 0..{task['max_ops']} operations, evaluation "
        f"chains of {task['eval_ops']}), then branched at its last checkpoint into finishing "
        f"stages of {', '.join(f'{100 * f:g}%' for f in sorted(e['fractions']))} of its "
        f"tokens, each step at a depth uniform in 1..{e['k_max']}, "
        + rates_sentence(e)
        + control_sentence(e)
        + "Chance is "
        f"{100 * numbers['chance']:.1f}%. "
        + produced_by(f"finishing --preset {numbers['preset']}", numbers),
        "",
        "Intervals are 95% t-intervals over seeds; a comparison is a finish minus its own base "
        "(same seed), in points. The primary comparisons were named in the preset before the "
        "runs, each decided by its own interval; every other difference is exploratory, "
        f"{corrected_over(a['exploratory'])}. "
        + holm_reach(a["exploratory"], lambda x: f"{100 * x:.1f} points"),
        "",
        "## Primary comparisons",
        "",
        primary_table(a),
        "",
        "## What finishing buys",
        "",
        guide_table(numbers, a),
        "",
        *accuracy_section(a, e["depths"], names),
        "## Every finish against its base",
        "",
        versus_table(a, names),
        "",
    ]
    return "\n".join(lines)


REPORT = DepthReport(
    "fixedfirst-finishing-report", RUN_FIELDS, ("scores",), report_markdown, labels
)
"""report.json, report.md and the figure: what the study writes beside its results."""
