"""frontier.md: one model's exit frontier as tables, made from its frontier.json alone.

The Pareto front and the reading at matched quality are computed again from the points
(`serve/pareto.py`), so the committed pair of a JSON and its Markdown can be remade by a test;
the document's own copies of them are what the study reads.
"""

from __future__ import annotations

import math
from typing import Any

from fixedfirst.serve.pareto import QualityMeasure, matched_quality, pareto_front

COMPUTE_WORDS = {
    "iterations": "recurrent iterations per token",
    "flops": "modeled forward GFLOPs per token",
}


def quality_text(value: float, measure: QualityMeasure) -> str:
    return f"{value:.4f}" if measure.name == "NLL" else f"{100 * value:.1f}%"


def compute_text(point: dict[str, Any], compute: str) -> str:
    return f"{point['mean_depth']:.2f}" if compute == "iterations" else f"{point['gflops']:.4g}"


def short(point: dict[str, Any]) -> str:
    """A point's name in a table cell: `fixed K=4`, `kl 0.001`."""
    if point["rule"] is None:
        return point["serving"]
    return f"{point['rule']} {point['threshold']:g}"


def _cell(value: float | None, fmt: str) -> str:
    return (
        ""
        if value is None or (isinstance(value, float) and math.isnan(value))
        else fmt.format(value)
    )


def header_lines(document: dict[str, Any]) -> list[str]:
    s, h, q, sp = (document[k] for k in ("settings", "held_out", "quality", "speed"))
    if h["kind"] == "chains":
        held = f"{h['sequences']} chains evaluation sequences (draw {h['draw']})"
    else:
        held = f"{h['rows']} held-out rows of {h['data']} (draw {h['draw']})"
    rules = ", ".join(
        f"{name} at {', '.join(f'{t:g}' for t in ts)}" for name, ts in s["exits"].items()
    )
    return [
        f"# Exit frontier: {document['run']}",
        "",
        f"Step {document['step']} of `{document['run']}` ({document['schedule']}, "
        f"{document['parameters']:,} parameters), served at fixed depths "
        f"{s['depths'][0]}..{s['depths'][-1]} and under each exit rule at each threshold "
        f"({rules}; max depth {s['max_depth']}), through the full cache. Quality: {q['name']} "
        f"({q['unit']}) on {held}, teacher-forced: every position decoded under the rule as "
        f"generation decodes it. Speed: {sp['rows']} prompts of {sp['prompt_tokens']} tokens "
        f"decoded as one batch, {sp['new_tokens']} greedy tokens each, the median of "
        f"{sp['repeats']} rounds that time every point in turn ({sp['threads']} thread(s), "
        f"{sp['device']}). Made by `fixedfirst frontier`.",
        "",
    ]


def matched_lines(document: dict[str, Any], matched: dict[str, Any]) -> list[str]:
    points, measure = document["points"], QualityMeasure.from_dict(document["quality"])
    best = points[matched["best_fixed"]]
    lines = [
        "## At matched quality",
        "",
        f"The best fixed depth is {best['serving']} ({measure.name} "
        f"{quality_text(best['quality'], measure)}); a point matches it at {measure.name} "
        f"{'at most' if measure.better == 'lower' else 'at least'} "
        f"{quality_text(matched['target'], measure)} ({measure.describe_tolerance()} it).",
        "",
        f"| compute | least that matches | at | saved against {best['serving']} | cheapest fixed "
        "depth that matches | saved by exiting beyond it |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for compute, words in COMPUTE_WORDS.items():
        m = matched["by"][compute]
        least, fixed = points[m["point"]], points[m["cheapest_fixed"]]
        lines.append(
            f"| {words} | {compute_text(least, compute)} | {short(least)} | {m['saved']:.1%} | "
            f"{fixed['serving']} ({compute_text(fixed, compute)}) | {m['saved_by_exit']:.1%} |"
        )
    if matched["speedup"] is not None:
        least = points[matched["by"]["iterations"]["point"]]
        lines += [
            "",
            f"Decoding at the least-iterations point ({short(least)}) ran at "
            f"{matched['speedup']:.2f}x the tokens per second of {best['serving']}.",
        ]
    lines += [
        "",
        "## Each exit rule at matched quality",
        "",
        "Its least compute over its thresholds that matches, with the fixed depths to fall back "
        "on (a rule that never matches saves only what the cheapest matching fixed depth does).",
        "",
        "| rule | least iterations | threshold | saved | beyond fixed | least GFLOPs | threshold "
        "| saved | beyond fixed |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for rule in matched["by"]["iterations"]["rules"]:
        cells = []
        for compute in COMPUTE_WORDS:
            r = matched["by"][compute]["rules"][rule]
            if r["point"] is None:
                cells += [
                    "no threshold matches",
                    "",
                    f"{r['saved']:.1%}",
                    f"{r['saved_by_exit']:.1%}",
                ]
            else:
                p = points[r["point"]]
                cells += [
                    compute_text(p, compute),
                    f"{p['threshold']:g}",
                    f"{r['saved']:.1%}",
                    f"{r['saved_by_exit']:.1%}",
                ]
        lines.append(f"| {rule} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def point_lines(document: dict[str, Any], front: list[int], matched: dict[str, Any]) -> list[str]:
    points, measure = document["points"], QualityMeasure.from_dict(document["quality"])
    bands = list(points[0].get("bands", {}))
    band_head = "".join(f" {b}: accuracy / depth |" for b in bands)
    lines = [
        "## Every point",
        "",
        "Mean depth: recurrent iterations per token, teacher-forced; decoding depth: the same in "
        "the timed greedy decoding, whose tokens per second the last column divides by fixed "
        "depth ceil(decoding depth)'s. Pareto: no other point is as cheap and as good, one of "
        "them strictly.",
        "",
        f"| serving | mean depth | {measure.name} | GFLOPs/token |{band_head} tokens/s | "
        "decoding depth | vs fixed ⌈d⌉ | matches | Pareto |",
        "| --- | --- | --- | --- |" + " --- |" * len(bands) + " --- | --- | --- | --- | --- |",
    ]
    for i, p in enumerate(points):
        band_cells = "".join(
            f" {100 * p['bands'][b]['accuracy']:.1f}% / {p['bands'][b]['mean_depth']:.2f} |"
            for b in bands
        )
        lines.append(
            f"| {p['serving']} | {p['mean_depth']:.2f} | {quality_text(p['quality'], measure)} | "
            f"{p['gflops']:.4g} |{band_cells} {_cell(p.get('tokens_per_s'), '{:,.1f}')} | "
            f"{_cell(p.get('decode_mean_depth'), '{:.2f}')} | "
            f"{_cell(p.get('vs_fixed_ceil'), '{:.2f}x')} | "
            f"{'yes' if i in matched['meeting'] else ''} | {'yes' if i in front else ''} |"
        )
    return [*lines, ""]


def frontier_markdown(document: dict[str, Any]) -> str:
    """frontier.md from frontier.json."""
    measure = QualityMeasure.from_dict(document["quality"])
    points = document["points"]
    matched = matched_quality(points, measure)
    front = pareto_front(points, measure)
    lines = [
        *header_lines(document),
        *matched_lines(document, matched),
        *point_lines(document, front, matched),
    ]
    return "\n".join(lines)
