"""report.md of the chains experiment: findings computed from the numbers, then the tables.

Every sentence is produced from the runs' scores (`analysis.py`): each claim's quantity as a mean
over seeds with its 95% interval over seeds, and the word the interval allows (higher, lower, or
cannot tell). The preset's primary comparisons come first, each decided by its own interval; the
rest are exploratory, their words corrected over the whole family (Holm). Nothing is canned, so
a run that disagrees with the paper, or with an earlier run, says so. report.md is made from
report.json alone (`report_numbers`: the scores the analysis reads, each run's cost and the
primary comparisons; `report_markdown` analyses them again).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fixedfirst.studies.chains.analysis import analyse, analysed_scores
from fixedfirst.studies.kit.claims import ZERO_EVERYWHERE
from fixedfirst.studies.kit.depth_arms import BAND_CLAIMS
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
from fixedfirst.tasks.chains.sets import STANDARD

NUMBERS_FORMAT = "fixedfirst-chains-report"
RUN_FIELDS = ("schedule", "label", "description", "seed", "steps", "tokens", "flops", "wall_s")

TABLE_DEPTHS = (1, 2, 4, 8, 16, 32, 64)
SIGN_WORDS = {
    "positive": "higher",
    "negative": "lower",
    "cannot tell": "cannot tell",
    ZERO_EVERYWHERE: ZERO_EVERYWHERE,
}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def points(d: dict[str, Any] | None) -> str:
    """A same-seed difference in accuracy points: mean [95% interval]."""
    if d is None:
        return "one seed: no interval"
    return f"{100 * d['mean']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"


def score(c: dict[str, Any]) -> str:
    """One arm's accuracy over seeds: mean [95% interval], or the single seed's value."""
    if c["low"] is None:
        return _pct(c["mean"])
    return f"{_pct(c['mean'])} [{_pct(c['low'])}, {_pct(c['high'])}]"


def _label(results: dict[str, Any], schedule: str) -> str:
    return next(r["label"] for r in results["runs"].values() if r["schedule"] == schedule)


def _band(a: dict[str, Any], role: str, set_name: str = STANDARD) -> str:
    return a["sets"][set_name]["bands"][role]["label"]


def word(d: dict[str, Any]) -> str:
    """A listed difference's verdict: "primary" for a primary comparison (decided in its own
    section); otherwise the Holm-corrected word, with the uncorrected one where they differ."""
    if "primary" in d:
        return "primary"
    corrected = SIGN_WORDS[d["holm"]]
    if d["holm"] == d["sign"]:
        return corrected
    return f"{corrected}; uncorrected {SIGN_WORDS[d['sign']]}"


def primary_findings(results: dict[str, Any]) -> list[str]:
    """One sentence per primary comparison: its quantity, interval and verdict."""
    a = results["analysis"]
    out = []
    for p in a["primary"]:
        band = f"accuracy on difficulty {_band(a, p['band'])}"
        if p["a"] == p["b"]:
            what = (
                f"{_label(results, p['a'])}, {band} at K={p['a_depth']} minus at K={p['b_depth']}"
            )
        elif p["a_depth"] == p["b_depth"]:
            what = (
                f"{_label(results, p['a'])} minus {_label(results, p['b'])}, {band} at "
                f"K={p['a_depth']}"
            )
        else:
            what = (
                f"{_label(results, p['a'])} at K={p['a_depth']} minus {_label(results, p['b'])} "
                f"at K={p['b_depth']}, {band}"
            )
        side = "above zero" if p["bar"] is None else f"at least {100 * p['bar']:.0f} points"
        what += f", points, mean over {len(a['seeds'])} seeds [95% interval]"
        out.append(claimed(p, what, points(p["difference"]), side))
    return out


def findings(results: dict[str, Any]) -> list[str]:
    """The exploratory findings: every listed difference with its Holm-corrected word."""
    a = results["analysis"]
    n = len(a["seeds"])
    k16, deepest = a["training_depth"], a["deepest_depth"]
    ref = a["reference"]
    out = []
    gains = [
        f"{_label(results, s)} {points(gain)} ({word(gain)})"
        for s, gain in a["depth_gain"].items()
        if gain is not None
    ]
    if gains:
        out.append(
            f"Depth decides the answer: on difficulty {_band(a, 'hard')} (the harder half of the "
            f"training range) accuracy at K={k16} minus K=1, points, mean over {n} seeds [95% "
            "interval over seeds]: " + "; ".join(gains) + "."
        )
    extrapolating = []
    for s, per_band in a["extrapolation"].items():
        cells = [
            f"{_band(a, role)} {points(d)} ({word(d)})"
            for role, d in per_band.items()
            if d is not None
        ]
        if cells:
            extrapolating.append(f"{_label(results, s)}: " + ", ".join(cells))
    if extrapolating:
        out.append(
            f"Serving deeper than trained, accuracy at K={deepest} minus K={k16} beyond the "
            "training range: " + "; ".join(extrapolating) + "."
        )
    if ref is not None:
        for s, per_set in a["versus_reference"].items():
            cells = [
                f"{_band(a, cell.split('@')[0])} at K={cell.split('@')[1]} {points(d)} ({word(d)})"
                for cell, d in per_set[STANDARD].items()
                if d is not None
            ]
            if cells:
                out.append(
                    f"At matched FLOPs, {_label(results, s)} minus {_label(results, ref)} (same "
                    "seed, points): " + "; ".join(cells) + "."
                )
    best = a.get("extrapolates_best")
    if best is not None:
        against = "; ".join(
            f"{_label(results, s)} {points(d)}" + ("" if d is None else f" ({word(d)})")
            for s, d in best["against"].items()
        )
        out.append(
            f"Extrapolates best (highest mean on {_band(a, 'near')} at K={best['depth']}): "
            f"{_label(results, best['schedule'])}, "
            + (
                "ahead of every other schedule in the paired differences"
                if best["holds"]
                else "but not ahead of every other schedule beyond the seeds' spread"
            )
            + f" ({against})."
        )
    solved = []
    for s, rules in a["solved"].items():
        cells = [
            f"{what} {r['mean']:.1f} ({r['min']:.0f}-{r['max']:.0f})" for what, r in rules.items()
        ]
        solved.append(f"{_label(results, s)}: " + ", ".join(cells))
    out.append(
        f"Solved up to difficulty d (every difficulty 0..d at >= {100 * a['solved_threshold']:.0f}%"
        f"; the training range ends at {results['task']['max_ops']}), mean over seeds (range), at "
        f"K={k16}, at K={deepest} and at the depth each run chose on its selection set: "
        + "; ".join(solved)
        + "."
    )
    collapse = []
    for s, c in a["collapse"].items():
        if not c:
            continue
        kept = c["kept"]
        seeds = c["collapsed_seeds"]
        collapse.append(
            f"{_label(results, s)} keeps {100 * kept['min']:.0f}-{100 * kept['max']:.0f}% "
            + (
                f"(collapses in seeds {', '.join(map(str, seeds))})"
                if seeds
                else "(no seed collapses)"
            )
        )
    if collapse:
        out.append(
            "Off-depth collapse (in-range accuracy at some depth 8..64 at most half of that at "
            "K=4): the least kept share of K=4's in-range accuracy, over seeds: "
            + "; ".join(collapse)
            + "."
        )
    depth_text = []
    for s, exit_rule in a["kl_exit"].items():
        bands = exit_rule["bands"]
        depth_text.append(
            f"{_label(results, s)} "
            + " / ".join(f"{b['mean_depth']['mean']:.1f}" for b in bands.values())
        )
    first = next(iter(a["kl_exit"].values()))
    out.append(
        f"KL exit (threshold {first['threshold']:g}, at most {first['max_depth']} iterations) "
        "uses on average, for difficulty "
        + " / ".join(b["label"] for b in a["sets"][STANDARD]["bands"].values())
        + ", these many core iterations: "
        + "; ".join(depth_text)
        + "."
    )
    return out


def accuracy_table(
    results: dict[str, Any], set_name: str = STANDARD, depths: tuple[int, ...] = TABLE_DEPTHS
) -> list[str]:
    a = results["analysis"]
    shown = [d for d in depths if d in results["experiment"]["depths"]]
    roles = a["sets"][set_name]["bands"]
    rows = [
        [
            _label(results, s),
            depth,
            *(score(a["band_accuracy"][s][set_name][role][str(depth)]) for role in roles),
        ]
        for s in a["schedules"]
        for depth in shown
    ]
    return table(["schedule", "K", *(f"d {b['label']}" for b in roles.values())], rows)


def sets_table(results: dict[str, Any]) -> list[str]:
    """Every named set: accuracy on the hard band at K=16 and on the near band at the deepest
    depth, and the latter's same-seed difference to the reference schedule."""
    a = results["analysis"]
    k16, deepest, ref = a["training_depth"], a["deepest_depth"], a["reference"]
    rows = []
    for name, info in a["sets"].items():
        hard, near = info["bands"]["hard"], info["bands"].get("near")
        for s in a["schedules"]:
            acc = a["band_accuracy"][s][name]
            near_cell = (
                "–" if near is None else f"{near['label']}: " + score(acc["near"][str(deepest)])
            )
            versus = "–"
            if ref is not None and s != ref and near is not None:
                d = a["versus_reference"][s][name].get(f"near@{deepest}")
                versus = "–" if d is None else f"{points(d)} ({word(d)})"
            hard_cell = f"{hard['label']}: {score(acc['hard'][str(k16)])}"
            rows.append([name, _label(results, s), hard_cell, near_cell, versus])
    versus_head = f"near at K={deepest} vs {_label(results, ref) if ref else 'reference'}"
    head = ["set", "schedule", f"hard band at K={k16}", f"near band at K={deepest}", versus_head]
    return table(head, rows)


def _exit_table(results: dict[str, Any]) -> list[str]:
    a = results["analysis"]
    roles = a["sets"][STANDARD]["bands"]
    rows = [
        [
            _label(results, s),
            *(
                f"{_pct(exit_rule['bands'][role]['accuracy']['mean'])} / "
                f"{exit_rule['bands'][role]['mean_depth']['mean']:.1f}"
                for role in roles
            ),
        ]
        for s, exit_rule in a["kl_exit"].items()
    ]
    head = ["schedule", *(f"d {b['label']}: acc % / depth" for b in roles.values())]
    return table(head, rows)


def report_numbers(results: dict[str, Any]) -> dict[str, Any]:
    """What report.md is computed from, from results.json: the task and evaluation sizes, the
    primary comparisons, every run's cost and the part of its scores the analysis reads
    (`analysed_scores`)."""
    task, e = results["task"], results["experiment"]
    return {
        "format": NUMBERS_FORMAT,
        "version": 1,
        "preset": results["preset"],
        "flop_budget": results["flop_budget"],
        "chance": results["chance"],
        "task": {key: task[key] for key in ("statements", "values", "max_ops", "eval_ops")},
        "experiment": {key: e[key] for key in ("depths", "sequences", "set_sequences", "primary")},
        "runs": {
            name: {
                **{key: r[key] for key in RUN_FIELDS},
                "scores": analysed_scores(r["scores"]),
            }
            for name, r in results["runs"].items()
        },
    }


def write_report(results: dict[str, Any], out: Path) -> None:
    """OUT/report.json (`report_numbers`) and OUT/report.md made from it."""
    write_numbers_and_report(out, report_numbers(results), report_markdown)


def report_markdown(numbers: dict[str, Any]) -> str:
    """report.md from report.json's numbers (or results.json, which holds them all)."""
    task, e = numbers["task"], numbers["experiment"]
    primary = [BAND_CLAIMS.read(p) for p in e["primary"]]
    analysis = analyse(numbers["runs"], e["depths"], task["max_ops"], primary)
    results = {**numbers, "analysis": analysis}
    a = results["analysis"]
    n = len(a["seeds"])
    family = a["exploratory"]
    lines = [
        "# Depth that matters: the chains task",
        "",
        f"Every schedule trained with seeds {', '.join(map(str, a['seeds']))} to the same budget "
        f"of {results['flop_budget']:.3g} modeled training FLOPs (each run ends within one step "
        f"below it). Sequences of {task['statements']} statements, values mod {task['values']}, "
        f"training chains of 0..{task['max_ops']} operations. Each seed is scored on its own "
        f"draw of evaluation sequences ({e['sequences']} standard ones, each with one chain of "
        f"{task['eval_ops']} operations; {e['set_sequences']} of every other named set), shared "
        f"by the schedules of that seed. Chance is {100 * results['chance']:.1f}%. "
        + produced_by(f"chains --preset {results['preset']}"),
        "",
        f"Intervals are 95% t-intervals over the {n} seeds, of one schedule's accuracy (cut at "
        '0 and 100%, which an accuracy cannot leave) or of a same-seed difference; "cannot '
        'tell" means the interval contains zero. The rules '
        "(bands, depths, what counts as solved, the depth chosen on the selection set) were "
        "fixed before the numbers (docs/design.md §5). The primary comparisons, named in the "
        "preset before the runs, are each decided by their own interval. Every other "
        f"difference is exploratory: of the {family['size']} the report computes (every set, "
        "band and depth; it lists some), each keeps its uncorrected 95% interval, and its "
        "word is corrected over all of them by Holm's method, so that the chance of any "
        f"wrong direction among them is at most 5%: {kept_by_holm(family)}. "
        + holm_reach(family, lambda x: f"{100 * x:.1f} points"),
        "",
        *primary_section("comparisons", primary_findings(results)),
        *exploratory_section(family, findings(results)),
        "## Accuracy by serving depth and difficulty band (standard set)",
        "",
        "Exact-match accuracy (%) at serving depth K, mean over seeds [95% interval over seeds].",
        "",
        *accuracy_table(results),
        "",
        "## Harder and shifted sets",
        "",
        "Each named set changes one thing against the standard set (tasks/chains/sets.py).",
        "",
        *sets_table(results),
        "",
        "## KL exit",
        "",
        *_exit_table(results),
        "",
        *runs_section(results["runs"], results["flop_budget"], True, "wall-clock s"),
    ]
    return "\n".join(lines)
