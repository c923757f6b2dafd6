"""report.md for Figure 1: the table behind the figure and sentences computed from it.

Every sentence is produced from the measured numbers (which schedule leads, by how much, whether
fixed K=4 holds its recall off its training depth); nothing is canned, so a run that disagrees
with the paper says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fixedfirst.experiments.bios.figure import STYLE
from fixedfirst.files import write_text_atomic

NOTHING = 0.1
"""Recall below this share of the ceiling is too little to rank schedules or judge collapse."""
COLLAPSE = 0.5
"""Fixed K=4 "collapses" at a depth when it keeps less than this share of its depth-4 recall."""


def _bits(results: dict[str, Any]) -> dict[tuple[str, float], dict[int, float]]:
    table: dict[tuple[str, float], dict[int, float]] = {}
    for r in results["recall"]:
        table.setdefault((r["schedule"], r["budget_fraction"]), {})[r["depth"]] = r[
            "bits_per_person"
        ]
    return table


def _snapshot_flops(results: dict[str, Any]) -> dict[tuple[str, float], float]:
    """Realised modeled FLOPs of the checkpoint scored at each (schedule, budget fraction)."""
    return {(r["schedule"], r["budget_fraction"]): r["flops"] for r in results["recall"]}


def _label(name: str) -> str:
    return STYLE.get(name, (name,))[0]


def _mean(values: dict[int, float]) -> float:
    return sum(values.values()) / len(values)


def findings(results: dict[str, Any]) -> list[str]:
    """Plain sentences stating what the numbers show."""
    bits = _bits(results)
    ceiling = results["ceiling_bits"]
    fractions = results["budget_fractions"]
    names = [n for n in STYLE if any((n, f) in bits for f in fractions)]
    out = []
    for fraction in fractions:
        at4 = {n: bits[(n, fraction)].get(4) for n in names if (n, fraction) in bits}
        means = {n: _mean(bits[(n, fraction)]) for n in names if (n, fraction) in bits}
        best4 = max((n for n in at4 if at4[n] is not None), key=lambda n: at4[n])
        best_mean = max(means, key=means.get)
        ranking = ", ".join(
            f"{_label(n)} {means[n]:.1f}" for n in sorted(means, key=means.get, reverse=True)
        )
        if max(means.values()) < NOTHING * ceiling:
            out.append(
                f"At {fraction:.0%} of the FLOP budget no schedule recalls much yet (mean over "
                f"serving depths: {ranking} bits of {ceiling:.2f})."
            )
            continue
        out.append(
            f"At {fraction:.0%} of the FLOP budget, {_label(best4)} recalls the most at serving "
            f"depth 4 ({at4[best4]:.1f} of {ceiling:.2f} bits), and the mean over serving depths "
            f"ranks the schedules {ranking} bits."
            + (
                ""  # the same leader, or a lead that vanishes at the precision printed
                if best_mean == best4 or f"{means[best_mean]:.1f}" == f"{means[best4]:.1f}"
                else f" The two orders differ: {_label(best_mean)} leads on average over depths."
            )
        )
    final = fractions[-1]
    fixed = bits.get(("fixed-4", final))
    if fixed and 4 in fixed and fixed[4] < NOTHING * ceiling:
        out.append(
            f"Fixed K=4 recalls only {fixed[4]:.1f} bits at its training depth at the full budget, "
            "too little to judge how it behaves off that depth."
        )
    elif fixed and 4 in fixed:
        deep = [d for d in fixed if d > 16]
        worst = min(deep, key=fixed.get) if deep else max(fixed)
        kept = fixed[worst] / fixed[4] if fixed[4] > 0 else 0.0
        verdict = (
            "collapses there, as the paper reports"
            if kept < COLLAPSE
            else "does not collapse there, unlike the paper's fixed-depth model"
        )
        out.append(
            f"Fixed K=4 at the full budget recalls {fixed[4]:.1f} bits at its training depth and "
            f"{fixed[worst]:.1f} bits at serving depth {worst} ({kept:.0%} of its depth-4 recall): "
            f"it {verdict}. At depth 1 it recalls {fixed.get(1, float('nan')):.1f} bits."
        )
    ff = bits.get(("fixed-first-4-0.8", final))
    uni = bits.get(("uniform-1-16", final))
    if ff:
        low = min(ff, key=ff.get)
        above_one = {d: v for d, v in ff.items() if d >= 2}
        low2 = min(above_one, key=above_one.get) if above_one else low
        high2 = max((above_one or ff).values())
        low_share, high_share = f"{ff[low2] / ceiling:.0%}", f"{high2 / ceiling:.0%}"
        share = low_share if low_share == high_share else f"{low_share} to {high_share}"
        low_bits, high_bits = f"{ff[low2]:.1f}", f"{high2:.1f}"
        recalled = (
            f"{low_bits} bits at every serving depth 2..{max(ff)}"
            if low_bits == high_bits
            else f"between {low_bits} (depth {low2}) and {high_bits} bits at serving depths "
            f"2..{max(ff)}"
        )
        out.append(
            f"Fixed-first at the full budget recalls {recalled} ({share} of the ceiling), "
            f"and {ff.get(1, float('nan')):.1f} bits at depth 1."
        )
        if uni:
            diff = _mean(ff) - _mean(uni)
            out.append(
                f"Averaged over serving depths, fixed-first ends {abs(diff):.1f} bits "
                f"{'above' if diff >= 0 else 'below'} uniform training at the same FLOPs "
                f"({_mean(ff):.1f} vs {_mean(uni):.1f})."
            )
    runs = results["runs"]
    if "uniform-1-16" in runs and "fixed-4" in runs:
        u, f = runs["uniform-1-16"]["steps"], runs["fixed-4"]["steps"]
        out.append(
            f"At matched FLOPs uniform training takes {u} optimizer steps against fixed K=4's "
            f"{f} ({u / f:.0%} as many): each of its updates is deeper and dearer."
        )
    return out


def write_report(results: dict[str, Any], path: Path) -> None:
    bits = _bits(results)
    depths = results["depths"]
    lines = [
        "# bioS recall at matched training FLOPs (Figure 1)",
        "",
        f"{results['people']} people, ceiling {results['ceiling_bits']:.2f} bits per person; "
        f"recall measured on {results['recall_people']} people; every run is planned on the "
        f"depths it draws to end within one step below the budget of "
        f"{results['flop_budget']:.3g} modeled training FLOPs (the runs table gives each run's "
        f"realised FLOPs and their share of the budget; a snapshot is the first checkpoint at or "
        f"past its fraction of the budget). Produced by `fixedfirst bios --preset "
        f"{results['preset']}`.",
        "",
        "## What the numbers show",
        "",
        *[f"- {s}" for s in findings(results)],
        "",
        "## Runs",
        "",
        "| run | schedule | steps | tokens | modeled FLOPs | of the budget | "
        "training wall-clock s |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    budget = results["flop_budget"]
    for name, r in results["runs"].items():
        lines.append(
            f"| {name} | {r['schedule']} | {r['steps']} | {r['tokens']:,} | {r['flops']:.4e} | "
            f"{100 * r['flops'] / budget:.2f}% | {r['wall_s']:.0f} |"
        )
    lines += ["", "## Recalled bits per person by serving depth", ""]
    header = "| schedule | budget | FLOPs | " + " | ".join(f"K={d}" for d in depths) + " |"
    lines += [header, "| --- | --- | --- | " + " | ".join("---" for _ in depths) + " |"]
    flops = _snapshot_flops(results)
    for fraction in results["budget_fractions"]:
        for name in STYLE:
            row = bits.get((name, fraction))
            if row:
                cells = " | ".join(f"{row[d]:.1f}" for d in depths)
                spent = flops[(name, fraction)]
                lines.append(
                    f"| {_label(name)} | {fraction:.0%} | {spent:.3e} ({100 * spent / budget:.1f}%)"
                    f" | {cells} |"
                )
    lines.append("")
    write_text_atomic(path, "\n".join(lines))
