"""report.md of the serving-economics study, made from report.json alone (`analyse` computes
every interval and verdict again from the runs' summaries)."""

from __future__ import annotations

from typing import Any

from fixedfirst.studies.kit.claims import ZERO_EVERYWHERE, family_counts, least_declarable
from fixedfirst.studies.kit.paragraphs import holm_reach, table
from fixedfirst.studies.serving.comparison import LEAST, analyse

QUANTITY_WORDS = {
    "saved": "saved at matched quality",
    "saved_by_exit": "saved by exiting beyond the cheapest matching fixed depth",
}
COMPUTE_WORDS = {"iterations": "recurrent iterations", "flops": "modeled FLOPs"}


def pct(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.1f}%"


def estimate(cell: dict[str, Any]) -> str:
    """mean [low, high] in percent, or the single seed's value."""
    if cell.get("low") is None:
        return f"{pct(cell['mean'])} (one seed)"
    return f"{pct(cell['mean'])} [{pct(cell['low'])}, {pct(cell['high'])}]"


def difference(d: dict[str, Any]) -> str:
    """A paired difference: in points of a share, or in iterations per token (`LEAST`)."""
    if d.get("quantity") == LEAST:
        return f"{d['mean']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}] iterations per token"
    return f"{100 * d['mean']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}] points"


def iterations(cell: dict[str, Any]) -> str:
    """Iterations per token over seeds: mean [low, high], or the single seed's value."""
    if cell.get("low") is None:
        return f"{cell['mean']:.2f} (one seed)"
    return f"{cell['mean']:.2f} [{cell['low']:.2f}, {cell['high']:.2f}]"


def setup_lines(numbers: dict[str, Any]) -> list[str]:
    f = numbers["frontier"]
    exits = "; ".join(
        f"{rule} at {', '.join(f'{t:g}' for t in ts)}" for rule, ts in f["exits"].items()
    )
    deepest = f["max_depth"] or "each run's deepest training depth"
    lines = [
        "# Serving economics by schedule",
        "",
        f"Every finished run of the studies below, served at fixed depths 1..K and under each exit "
        f"rule over its thresholds ({exits}; K = {deepest}), "
        f"quality teacher-forced through the full cache on a held-out draw of its own (seed "
        f"{f['seed']} mixed with the run's seeds: {f['sequences']} chains sequences, or "
        f"{f['rows']} validation rows of a text run). A point matches the run's best fixed depth "
        "within 0.5% of its NLL or 1 accuracy point; the least compute that matches, against the "
        "best fixed depth's, is the compute saved at matched quality, and what it saves beyond "
        "the cheapest fixed depth that matches is what exiting adds. Intervals: 95% over seeds. "
        f"Made by `fixedfirst serving-economics {numbers['config']}`; each run's frontier is "
        "beside the report (frontiers/STUDY/RUN/frontier.md).",
        "",
    ]
    for study in numbers["studies"]:
        arms = ", ".join(f"{arm} (`{run}`)" for arm, run in study["arms"].items())
        n = len(numbers["runs"].get(study["name"], {}))
        lines.append(
            f"- **{study['name']}**: `{study['directory']}`, seeds "
            f"{', '.join(map(str, study['seeds']))}; arms {arms}; {n} runs measured."
        )
    if numbers["missing"]:
        lines += ["", f"Not finished yet, left out: {', '.join(numbers['missing'])}."]
    return [*lines, ""]


def quantity(d: dict[str, Any]) -> str:
    """A compared quantity in words: what is counted, and what saving."""
    if d["quantity"] == LEAST:
        return "least recurrent iterations per token at matched quality"
    return f"{COMPUTE_WORDS[d['compute']]} {QUANTITY_WORDS[d['quantity']]}"


def primary_lines(analysis: dict[str, Any]) -> list[str]:
    rows = []
    for p in analysis["primary"]:
        d = p["difference"]
        cell = "not enough seeds (two in common needed)" if d is None else difference(d)
        verdict = p["verdict"] or "cannot tell"
        rows.append([p["name"], p["study"], f"{p['a']} - {p['b']}", quantity(p), cell, verdict])
    if not analysis["primary"]:
        rows.append(["(none named)", "", "", "", "", ""])
    return [
        "## Primary comparisons",
        "",
        "Named in the config before the runs; each is decided by its own 95% interval over seeds "
        "(a - b, paired by seed).",
        "",
        *table(["comparison", "study", "a - b", "quantity", "difference", "verdict"], rows),
        "",
    ]


def arm_lines(numbers: dict[str, Any], analysis: dict[str, Any]) -> list[str]:
    lines = ["## Compute saved at matched quality, by schedule", ""]
    head = [
        "arm",
        "seeds",
        "iterations saved",
        "beyond fixed",
        "FLOPs saved",
        "beyond fixed",
        "best fixed depth per seed",
    ]
    for study in numbers["studies"]:
        rows = [
            [
                arm,
                len(a["seeds"]),
                *(estimate(a["by"][c][q]) for c in ("iterations", "flops") for q in QUANTITY_WORDS),
                ", ".join(f"{d}" for d in a["best_fixed_depths"].values()),
            ]
            for arm, a in analysis["studies"][study["name"]]["arms"].items()
        ]
        lines += [f"### {study['name']}", "", *table(head, rows), ""]
    return lines


def exit_lines(numbers: dict[str, Any], analysis: dict[str, Any]) -> list[str]:
    """What exiting saves against a reference every run shares: the shallowest fixed depth that
    matches the best one (the plateau's first depth), and the least iterations per token."""
    lines = [
        "## What exiting saves",
        "",
        '"Iterations saved" above is measured against each run\'s best fixed depth, which differs '
        "from run to run (an argmax over a flat curve), so most of it is a shallower fixed depth "
        "matching that best one. Measured against what every run shares: the least recurrent "
        "iterations per token at matched quality, the shallowest fixed depth that matches (the "
        "plateau's first depth), and the share of that depth's compute exiting saves. Chosen "
        "after the runs (issue 70), so their differences are exploratory (below).",
        "",
    ]
    head = [
        "arm",
        "least iterations per token",
        "shallowest matching fixed depth",
        "exiting saves of it, iterations",
        "exiting saves of it, FLOPs",
    ]
    for study in numbers["studies"]:
        arms = analysis["studies"][study["name"]]["arms"]
        rows = [
            [
                arm,
                iterations(a["least"]),
                iterations(a["shallowest_matching_depth"]),
                estimate(a["by"]["iterations"]["saved_by_exit"]),
                estimate(a["by"]["flops"]["saved_by_exit"]),
            ]
            for arm, a in arms.items()
        ]
        lines += [f"### {study['name']}", "", *table(head, rows), ""]
    return lines


def rule_lines(numbers: dict[str, Any], analysis: dict[str, Any]) -> list[str]:
    lines = [
        "## Which exit rule, for which schedule",
        "",
        "Each rule's recurrent iterations saved at matched quality (its best threshold, with the "
        "fixed depths to fall back on); the best rule's lead over the runner-up is paired by seed "
        "and corrected with the exploratory family below.",
        "",
    ]
    for study in numbers["studies"]:
        arms = analysis["studies"][study["name"]]["arms"]
        if not arms:
            continue
        rules = list(next(iter(arms.values()))["rules"])
        rows = [
            [
                arm,
                *(estimate(a["rules"][r]) for r in rules),
                a["best_rule"],
                "one seed"
                if a["lead"] is None
                else f"{difference(a['lead'])} over {a['runner_up']}",
            ]
            for arm, a in arms.items()
        ]
        head = ["arm", *rules, "best", "lead over the runner-up"]
        lines += [f"### {study['name']}", "", *table(head, rows), ""]
    return lines


def exploratory_lines(analysis: dict[str, Any]) -> list[str]:
    family = analysis["exploratory"]
    counts = family_counts(family)
    members = [d for d in family if d["holm"] != ZERO_EVERYWHERE]
    shares = [d for d in members if d["quantity"] != LEAST]
    counts["least_declarable"] = least_declarable(shares, counts["size"])
    per_token = least_declarable([d for d in members if d not in shares], counts["size"])
    in_iterations = (
        ""
        if per_token is None
        else f" In least iterations per token, the smallest is {per_token:.2f} iterations."
    )
    rows = [
        [d["study"], f"{d['a']} - {d['b']}", quantity(d), difference(d), d["sign"], d["holm"]]
        for d in family
    ]
    return [
        "## Exploratory differences",
        "",
        f"Every other paired difference ({counts['size']}), each with its uncorrected sign and "
        "its verdict after Holm's correction over all of them; an interval that holds zero is "
        '"cannot tell". '
        + holm_reach(counts, lambda x: f"{100 * x:.1f} points (of a share)")
        + in_iterations,
        "",
        *table(["study", "a - b", "quantity", "difference", "uncorrected", "Holm"], rows),
        "",
    ]


def report_markdown(numbers: dict[str, Any]) -> str:
    """report.md from report.json."""
    analysis = analyse(numbers)
    lines = [
        *setup_lines(numbers),
        *primary_lines(analysis),
        *arm_lines(numbers, analysis),
        *exit_lines(numbers, analysis),
        *rule_lines(numbers, analysis),
        *exploratory_lines(analysis),
    ]
    return "\n".join(lines)
