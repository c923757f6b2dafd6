"""report.md of the architecture ablation: the task metric at the training depth and at 2x, 4x
and 16x it, per variant, and sentences computed from that table; made from report.json alone
(`report_numbers`: results.json without what the report does not read, each run's steps and
FLOPs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fixedfirst.stats.evidence import common_seeds, paired, sign
from fixedfirst.studies.kit.report_files import write_numbers_and_report

NUMBERS_FORMAT = "fixedfirst-ablation-report"
SETUP_FIELDS = (
    "task",
    "preset",
    "training_depth",
    "depths",
    "flop_budget",
    "seeds",
    "variants",
    "score_name",
)
PRESET = "preset"
"""The variant every other is compared with: the preset's own switches."""
SIGN_WORDS = {"positive": "higher", "negative": "lower", "cannot tell": "cannot tell"}
COLLAPSE = 0.5
"""A variant collapses at a depth where it keeps less than this share of its training-depth
score (the bios report's rule)."""


def table(results: dict[str, Any]) -> dict[str, dict[int, list[float]]]:
    """variant -> depth -> the score of every seed."""
    out: dict[str, dict[int, list[float]]] = {}
    for run in results["runs"].values():
        for depth, value in run["scores"].items():
            out.setdefault(run["variant"], {}).setdefault(int(depth), []).append(value)
    return out


def _cell(values: list[float]) -> str:
    mean = float(np.mean(values))
    if len(values) == 1:
        return f"{mean:.3g}"
    return f"{mean:.3g} ({min(values):.3g}-{max(values):.3g})"


def findings(results: dict[str, Any]) -> list[str]:
    k = results["training_depth"]
    deepest = max(results["depths"])
    rows = table(results)
    out = []
    collapsed: list[str] = []
    held: list[str] = []
    for variant, by_depth in rows.items():
        at_k, at_deep = float(np.mean(by_depth[k])), float(np.mean(by_depth[deepest]))
        kept = at_deep / at_k if at_k > 0 else float("nan")
        text = f"{variant} ({at_k:.3g} at K={k}, {at_deep:.3g} at K={deepest}, {kept:.0%} kept)"
        (collapsed if kept < COLLAPSE else held).append(text)
    if collapsed:
        out.append(
            f"Trained at fixed K={k}, these variants keep less than {COLLAPSE:.0%} of their score "
            f"at K={deepest}, the collapse the paper reports: " + "; ".join(collapsed) + "."
        )
    else:
        out.append(f"No variant collapses at K={deepest} (none keeps less than {COLLAPSE:.0%}).")
    if held:
        out.append("These hold their score at 16x the training depth: " + "; ".join(held) + ".")
    versus = versus_preset(results, deepest)
    if versus:
        out.append(versus)
    return out


def versus_preset(results: dict[str, Any], depth: int) -> str | None:
    """Each variant's same-seed difference from the preset at `depth`, with its 95% t-interval
    over the seeds and the word it allows; None with fewer than two seeds both ran. A run's seed
    is its name's (`VARIANT-seedN`, as the experiment names its runs)."""
    scores: dict[str, dict[int, float]] = {}  # variant -> seed -> score at depth
    for name, run in results["runs"].items():
        scores.setdefault(run["variant"], {})
        scores[run["variant"]][int(name.rsplit("-seed", 1)[1])] = run["scores"][str(depth)]
    preset = scores.pop(PRESET, {})
    parts = []
    for variant, by_seed in scores.items():
        if len(common_seeds(by_seed, preset)) < 2:
            return None
        d = paired(by_seed, preset)
        parts.append(
            f"{variant} {d.mean:+.3f} [{d.low:+.3f}, {d.high:+.3f}] ({SIGN_WORDS[sign(d)]})"
        )
    if not parts:
        return None
    return (
        f"Same-seed difference from the preset at K={depth}, mean [95% t-interval over the "
        f"{len(preset)} seeds]: " + "; ".join(parts) + "."
    )


def report_numbers(results: dict[str, Any]) -> dict[str, Any]:
    """What report.md is computed from, from results.json: the setup and every run's scores."""
    return {
        "format": NUMBERS_FORMAT,
        "version": 1,
        **{key: results[key] for key in SETUP_FIELDS},
        "runs": {
            name: {"variant": r["variant"], "scores": r["scores"]}
            for name, r in results["runs"].items()
        },
    }


def write_report(results: dict[str, Any], out: Path) -> None:
    """OUT/report.json (`report_numbers`) and OUT/report.md made from it."""
    write_numbers_and_report(out, report_numbers(results), report_markdown)


def report_markdown(results: dict[str, Any]) -> str:
    """report.md from report.json's numbers (or results.json, which holds them all)."""
    rows = table(results)
    depths = results["depths"]
    header = "| variant | model overrides | " + " | ".join(f"K={d}" for d in depths) + " |"
    lines = [
        f"# Fixed-depth training across serving depths: {results['task']}",
        "",
        f"Each variant trained at fixed K={results['training_depth']} to "
        f"{results['flop_budget']:.3g} modeled FLOPs (the `{results['preset']}` preset of "
        f"`fixedfirst {results['task']}`), seeds {', '.join(map(str, results['seeds']))}; "
        f"scored: {results['score_name']} (mean of the seeds, their range in brackets). "
        f"Produced by `fixedfirst ablation --task {results['task']}`.",
        "",
        "## What the numbers show",
        "",
        *[f"- {s}" for s in findings(results)],
        "",
        "## Score by serving depth",
        "",
        header,
        "| --- | --- |" + " --- |" * len(depths),
    ]
    for variant, overrides in results["variants"].items():
        cells = " | ".join(_cell(rows[variant][d]) for d in depths)
        lines.append(f"| {variant} | {', '.join(overrides) or '(the preset)'} | {cells} |")
    lines.append("")
    return "\n".join(lines)
