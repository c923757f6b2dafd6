"""What a rerun moved: two chains experiments of the same preset, run by run and verdict by verdict.

Training is bit-identical from run to run on one machine, but another machine (or another thread
count: reductions split differently) rounds differently, and a few hundred steps turn that into a
different model. `fixedfirst chains --out NEW --compare OLD` writes NEW/rerun.md: how far each
run's accuracy moved (per band at depths 16 and 64), and whether every verdict of OLD's report
(each primary comparison's, each same-seed difference's sign uncorrected and, where both runs
have it, after the Holm correction, the best extrapolating schedule) kept its side in NEW.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fixedfirst.tasks.chains.sets import STANDARD

DEPTHS = (16, 64)


def _signs(a: dict[str, Any]) -> dict[str, str]:
    """Every verdict of an analysis, by a name that is the same in every run of the preset."""
    out = {}
    for p in a.get("primary", []):
        if p["verdict"] is not None:
            out[f"primary: {p['name']}"] = p["verdict"]
    differences: dict[str, dict[str, Any] | None] = {}
    for s, gain in a["depth_gain"].items():
        differences[f"{s}: depth gain on the hard band"] = gain
    for s, per_band in a["extrapolation"].items():
        for role, d in per_band.items():
            differences[f"{s}: extrapolation on {role}"] = d
    for s, per_set in a["versus_reference"].items():
        for name, cells in per_set.items():
            for cell, d in cells.items():
                differences[f"{s} vs {a['reference']}: {name} {cell}"] = d
    for claim, d in differences.items():
        if d is not None:
            out[claim] = d["sign"]
            if "holm" in d:
                out[f"{claim} (Holm)"] = d["holm"]
    best = a.get("extrapolates_best")
    if best is not None:
        out["extrapolates best"] = best["schedule"] + (" (holds)" if best["holds"] else "")
    return out


def compare(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Per-run accuracy movements and verdict agreement between two results documents."""
    moved = []
    for name, run in new["runs"].items():
        before = old["runs"].get(name)
        if before is None:
            continue
        for label, band in run["scores"]["sets"][STANDARD]["bands"].items():
            previous = before["scores"]["sets"][STANDARD]["bands"].get(label)
            if previous is None:
                continue
            for d in DEPTHS:
                key = str(d)
                if key in band["by_depth"] and key in previous["by_depth"]:
                    moved.append(
                        {
                            "run": name,
                            "band": label,
                            "depth": d,
                            "old": previous["by_depth"][key],
                            "new": band["by_depth"][key],
                        }
                    )
    old_signs, new_signs = _signs(old["analysis"]), _signs(new["analysis"])
    verdicts = [
        {"claim": k, "old": old_signs[k], "new": new_signs[k], "kept": old_signs[k] == new_signs[k]}
        for k in old_signs
        if k in new_signs
    ]
    differences = np.abs([m["new"] - m["old"] for m in moved]) if moved else np.zeros(1)
    return {
        "cells": moved,
        "median_abs_change": float(np.median(differences)),
        "max_abs_change": float(np.max(differences)),
        "identical_runs": sum(
            old["runs"][n]["scores"] == new["runs"][n]["scores"]
            for n in new["runs"]
            if n in old["runs"]
        ),
        "verdicts": verdicts,
    }


def rerun_markdown(comparison: dict[str, Any], old_label: str, new_label: str) -> str:
    c = comparison
    kept = [v for v in c["verdicts"] if v["kept"]]
    flipped = [
        v for v in c["verdicts"] if not v["kept"] and "cannot tell" not in (v["old"], v["new"])
    ]
    softened = [v for v in c["verdicts"] if not v["kept"] and v not in flipped]
    lines = [
        f"# Rerun: {new_label} against {old_label}",
        "",
        f"Runs with identical scores: {c['identical_runs']}. Accuracy per (run, band, depth "
        f"{' and '.join(map(str, DEPTHS))}) on the standard set moved by "
        f"{100 * c['median_abs_change']:.1f} points at the median and "
        f"{100 * c['max_abs_change']:.1f} at most.",
        "",
        f"Verdicts: {len(kept)} of {len(c['verdicts'])} kept their side; {len(flipped)} turned "
        f'around; {len(softened)} moved between a sign and "cannot tell".',
        "",
        "| claim | before | after |",
        "| --- | --- | --- |",
    ]
    for v in [*flipped, *softened]:
        lines.append(f"| {v['claim']} | {v['old']} | {v['new']} |")
    lines += [
        "",
        "The largest movements:",
        "",
        "| run | band | depth | before | after |",
        "| --- | --- | --- | --- | --- |",
    ]
    for m in sorted(c["cells"], key=lambda m: -abs(m["new"] - m["old"]))[:10]:
        lines.append(
            f"| {m['run']} | {m['band']} | {m['depth']} | {100 * m['old']:.1f} | "
            f"{100 * m['new']:.1f} |"
        )
    return "\n".join(lines) + "\n"
