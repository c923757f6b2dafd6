"""report.md for Figure 1: sentences computed from the seeds' recall, then the tables behind them.

Every sentence is produced from the recall of every run (`analysis.py`): the preset's primary
claims first, each decided by its own 95% interval over seeds; then comparisons as same-seed
differences with their 95% intervals and the word those allow (higher, lower, cannot tell),
corrected over all of them (Holm), and the regime and collapse questions answered per seed.
Nothing is canned, so a run that disagrees with the paper says so. report.md is made from
report.json alone (`report_numbers`: the recall, each run's cost and the primary claims, no
analysis; `report_markdown` analyses them again).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fixedfirst.studies.bios.analysis import COLLAPSE, FIXED, NOTHING, analyse
from fixedfirst.studies.bios.figure import label
from fixedfirst.studies.kit.claims import ZERO_EVERYWHERE
from fixedfirst.studies.kit.paragraphs import (
    claimed,
    exploratory_section,
    holm_reach,
    kept_by_holm,
    primary_section,
    produced_by,
    runs_section,
    table,
)
from fixedfirst.studies.kit.report_files import write_numbers_and_report

NUMBERS_FORMAT = "fixedfirst-bios-report"
RUN_FIELDS = ("schedule", "description", "steps", "tokens", "flops", "wall_s")
RECALL_FIELDS = ("schedule", "seed", "budget_fraction", "depth", "bits_per_person")
SETUP_FIELDS = (
    "preset",
    "flop_budget",
    "ceiling_bits",
    "people",
    "recall_people",
    "depths",
    "budget_fractions",
    "primary",
)

SIGN_WORDS = {
    "positive": "higher",
    "negative": "lower",
    "cannot tell": "cannot tell",
    ZERO_EVERYWHERE: ZERO_EVERYWHERE,
}


def bits(c: dict[str, Any]) -> str:
    """An arm's recall over seeds: mean [95% interval] (the interval cut at 0 and the ceiling,
    so not mean ± a half-width), or the single seed's value."""
    if c["low"] is None:
        return f"{c['mean']:.1f}"
    return f"{c['mean']:.1f} [{c['low']:.1f}, {c['high']:.1f}]"


def difference(d: dict[str, Any] | None) -> str:
    """A same-seed difference in bits, with its Holm-corrected word (and the uncorrected one
    where they differ)."""
    if d is None:
        return "one seed: no interval"
    word = SIGN_WORDS[d["holm"]]
    if d["holm"] != d["sign"]:
        word += f"; uncorrected {SIGN_WORDS[d['sign']]}"
    return f"{d['mean']:+.1f} [{d['low']:+.1f}, {d['high']:+.1f}] bits ({word})"


def primary_findings(results: dict[str, Any]) -> list[str]:
    """One sentence per primary claim: its quantity over seeds, the claim and the verdict."""
    a = results["analysis"]
    out = []
    for p in a["primary"]:
        c = p["over_seeds"]
        if c is None:
            value = "no seed recalls enough at depth 4 to judge"
        elif c["low"] is None:
            value = f"{100 * c['mean']:.1f}% (one seed: no interval)"
        else:
            value = (
                f"{100 * c['mean']:.1f}% [{100 * c['low']:.1f}, {100 * c['high']:.1f}], mean over "
                f"{c['n']} seeds [95% interval]"
            )
        what = f"{label(p['arm'])} at the full budget, {p['quantity_words']}"
        out.append(claimed(p, what, value, f"{p['claim']} {100 * p['bar']:.0f}%"))
    return out


def findings(results: dict[str, Any]) -> list[str]:
    a = results["analysis"]
    ceiling = results["ceiling_bits"]
    n = len(a["seeds"])
    fractions = results["budget_fractions"]
    family = a["exploratory"]
    out = [
        f"{n} seed{'s' if n > 1 else ''} per arm; intervals are 95% over seeds, differences "
        "are same-seed differences; a difference whose interval contains 0 cannot be told apart."
    ]
    if family["size"]:
        pairs = a["pairs"]
        which = (
            f"every pair of the {len(a['arms'])} arms"
            if pairs["compared"] == pairs["possible"]
            else f"{pairs['compared']} of the {pairs['possible']} pairs of arms"
        )
        off = a["off_depth"]
        off_words = f", averaged off depth over {off[0]}..{off[1]}" if off else ""
        out.append(
            f"The same-seed differences are exploratory: of the {family['size']} the report "
            f"computes ({which}, at every budget fraction: recall averaged over serving "
            f"depths{off_words}, and at single depths; it lists the averages), each keeps its "
            "uncorrected 95% interval and its word is corrected over all of them by Holm's "
            f"method: {kept_by_holm(family)}. " + holm_reach(family, lambda x: f"{x:.2f} bits")
        )
    for fraction in fractions:
        cells = {
            arm: a["cells"][arm][f"{fraction:g}"]
            for arm in a["arms"]
            if f"{fraction:g}" in a["cells"][arm]
        }
        means = ", ".join(
            f"{label(arm)} {bits(c['mean_over_depths'])}"
            for arm, c in sorted(cells.items(), key=lambda x: -x[1]["mean_over_depths"]["mean"])
        )
        if max(c["mean_over_depths"]["mean"] for c in cells.values()) < NOTHING * ceiling:
            out.append(
                f"At {fraction:.0%} of the FLOP budget no arm recalls much yet (mean over serving "
                f"depths: {means} bits of {ceiling:.2f})."
            )
            continue
        at4 = ", ".join(f"{label(arm)} {bits(c['by_depth']['4'])}" for arm, c in cells.items())
        text = (
            f"At {fraction:.0%} of the FLOP budget, recall averaged over serving depths: {means} "
            f"bits of {ceiling:.2f}; at serving depth 4: {at4}."
        )
        compared = [c for c in a["comparisons"] if c["fraction"] == fraction]
        if compared:
            holm = f", exploratory (Holm over {family['size']})" if family["size"] else ""
            text += f" Same-seed differences of the average{holm}: " + "; ".join(
                f"{label(c['a'])} minus {label(c['b'])} {difference(c['mean_over_depths'])}"
                for c in compared
            )
            text += "."
        out.append(text)
    contrast = figure1_contrast(results)
    if contrast:
        out.append(contrast)
    regime = a.get("regime")
    if regime is not None:
        seeds = "; ".join(
            f"seed {s}: depth 4 at {100 * r['depth_4_of_ceiling']:.0f}% of the ceiling, depth 1 at "
            f"{100 * r['depth_1_of_depth_4']:.0f}% of depth 4"
            for s, r in regime["per_seed"].items()
        )
        verdict = (
            "holds in every seed: recall runs through the loop"
            if regime["holds_in_every_seed"]
            else "does not hold in every seed"
        )
        out.append(
            f"The regime (fixed K=4 at the full budget recalls at depth 4 >= "
            f"{100 * regime['ceiling_share']:.0f}% of the ceiling and at depth 1 <= "
            f"{100 * regime['shallow_share']:.0f}% of its depth-4 recall) {verdict} ({seeds})."
        )
    for arm, c in a["collapse"].items():
        if not c["per_seed"]:
            continue
        kept = "; ".join(
            f"seed {s}: {100 * k['kept']:.0f}% at depth {k['depth']}"
            for s, k in c["per_seed"].items()
        )
        collapsed = c["collapsed_seeds"]
        verdict = (
            f"collapses in seed{'s' if len(collapsed) > 1 else ''} "
            + ", ".join(map(str, collapsed))
            if collapsed
            else "collapses in no seed"
        )
        left = c["too_little_to_judge"]
        note = (
            f" (seeds {', '.join(map(str, left))} recall too little at depth 4 to judge)"
            if left
            else ""
        )
        if arm == "fixed-4" or collapsed:
            out.append(
                f"Off-depth collapse at the full budget (recall at some serving depth 8..64 at "
                f"most {100 * COLLAPSE:.0f}% of that at depth 4): {label(arm)} {verdict}; the "
                f"least kept share per seed: {kept}{note}."
            )
    for arm, c in a["at_ceiling"].items():
        if arm.startswith("fixed-first"):
            low, high = c["depths"]
            out.append(
                f"{label(arm)} at the full budget: its least recall over serving depths "
                f"{low}..{high} is {100 * c['mean']:.0f}% of the ceiling on average over seeds "
                f"({100 * c['min']:.0f}-{100 * c['max']:.0f}%)."
            )
    rates: dict[str, dict[str, Any]] = {}
    for name, r in a["learning_rate"].items():
        arm = results["runs"][name]["schedule"]
        rates.setdefault(arm, r)
    for arm, r in rates.items():
        out.append(
            f"{label(arm)} ({r['lr_schedule']} learning rate): at the switch the rate is "
            f"{r['at_switch']:.2e} ({100 * r['at_switch'] / r['peak']:.0f}% of the peak), over "
            f"the finishing stage {r['mean_finish']:.2e} on average "
            f"({100 * r['mean_finish'] / r['peak']:.0f}%)."
        )
    steps: dict[str, list[int]] = {}
    for run in results["runs"].values():
        steps.setdefault(run["schedule"], []).append(run["steps"])
    out.append(
        "Optimizer steps at matched FLOPs: "
        + ", ".join(
            f"{label(arm)} {min(s)}" + (f"-{max(s)}" if max(s) != min(s) else "")
            for arm, s in steps.items()
        )
        + ": a deeper update is a dearer one."
    )
    return out


def figure1_contrast(results: dict[str, Any]) -> str | None:
    """Figure 1's contrast at the full budget: each fixed-first arm minus fixed K = 4, off its
    depth (recall averaged over serving depths 8..64) and over every serving depth, each with its
    Holm-corrected word; None where fixed K = 4 or the off-depth depths are missing."""
    a = results["analysis"]
    final = results["budget_fractions"][-1]
    off = a["off_depth"]
    compared = [
        c
        for c in a["comparisons"]
        if c["b"] == FIXED and c["a"].startswith("fixed-first") and c["fraction"] == final
    ]
    if not compared or off is None:
        return None
    return (
        f"Figure 1's contrast at the full budget, each fixed-first arm minus {label(FIXED)} (same "
        f"seed, exploratory): off depth (recall averaged over serving depths {off[0]}..{off[1]}) "
        "and averaged over every serving depth: "
        + "; ".join(
            f"{label(c['a'])}: off depth {difference(c['mean_off_depth'])}, over every depth "
            f"{difference(c['mean_over_depths'])}"
            for c in compared
        )
        + "."
    )


def report_numbers(results: dict[str, Any]) -> dict[str, Any]:
    """What report.md is computed from, from results.json: the setup, every run's cost (and the
    learning rate at a switch), every (run, budget fraction, serving depth)'s recall."""
    runs = {}
    for name, r in results["runs"].items():
        run = {key: r[key] for key in RUN_FIELDS}
        switch = r.get("switch") or {}
        if "lr" in switch:
            run["lr_schedule"] = r["lr_schedule"]
            run["switch"] = {key: switch[key] for key in ("lr", "mean_finish_lr", "peak_lr")}
        runs[name] = run
    return {
        "format": NUMBERS_FORMAT,
        "version": 1,
        **{key: results[key] for key in SETUP_FIELDS},
        "runs": runs,
        "recall": [{key: r[key] for key in RECALL_FIELDS} for r in results["recall"]],
    }


def write_report(results: dict[str, Any], out: Path) -> None:
    """OUT/report.json (`report_numbers`) and OUT/report.md made from it."""
    write_numbers_and_report(out, report_numbers(results), report_markdown)


def report_markdown(numbers: dict[str, Any]) -> str:
    """report.md from report.json's numbers (or results.json, which holds them all)."""
    results = {**numbers, "analysis": analyse(numbers)}
    a = results["analysis"]
    depths = results["depths"]
    budget = results["flop_budget"]
    lines = [
        "# bioS recall at matched training FLOPs (Figure 1)",
        "",
        f"{results['people']} people, ceiling {results['ceiling_bits']:.2f} bits per person; "
        f"recall measured on {results['recall_people']} people; every run is planned on the "
        f"depths it draws to end within one step below the budget of {budget:.3g} modeled "
        "training FLOPs (the runs table gives each run's realised FLOPs and their share of the "
        "budget; a snapshot is the first checkpoint at or past its fraction of the budget). "
        + produced_by(f"bios --preset {results['preset']}"),
        "",
        *primary_section("claims", primary_findings(results)),
        *exploratory_section(a["exploratory"], findings(results)),
        "## Recalled bits per person by serving depth",
        "",
        "Mean over seeds [its 95% interval over seeds, cut at 0 and the ceiling].",
        "",
        *table(["arm", "budget", *(f"K={d}" for d in depths)], recall_rows(results)),
        "",
        *runs_section(results["runs"], budget, False, "training wall-clock s"),
    ]
    return "\n".join(lines)


def recall_rows(results: dict[str, Any]) -> list[list[str]]:
    """(arm, budget fraction, recall at each serving depth) of every cell the arms reached."""
    a = results["analysis"]
    rows = []
    for fraction in results["budget_fractions"]:
        for arm in a["arms"]:
            cell = a["cells"][arm].get(f"{fraction:g}")
            if cell is not None:
                by_depth = [bits(cell["by_depth"][str(d)]) for d in results["depths"]]
                rows.append([label(arm), f"{fraction:.0%}", *by_depth])
    return rows
