"""The finishing study's report on text: report.json and report.md (remade from report.json alone,
kit/report_files.py) and the figure of held-out NLL by depth, for a preset on `tokens` data.

The chains report (report.py) reads accuracy by difficulty band; this one reads held-out NLL per
token (studies/kit/nll_arms.py), lower being better, in the same shape: the primary comparisons,
the table the guide quotes (each finish's NLL at one pass, at the base's depth K, at k_max and at
the deepest depth, against the base), the NLL by depth, every finish against its base.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from fixedfirst.files.writing import save_figure
from fixedfirst.studies.finishing.report import (
    RUN_FIELDS,
    control_sentence,
    labels,
    rates_sentence,
)
from fixedfirst.studies.kit.claims import Claim
from fixedfirst.studies.kit.depth_tables import versus_table
from fixedfirst.studies.kit.nll_arms import NLL_CLAIMS, analyse_nll_arms
from fixedfirst.studies.kit.paragraphs import corrected_over, holm_reach, produced_by, table
from fixedfirst.studies.kit.report_files import write_numbers_and_report

FIGURE = "nll_by_depth.png"
SETTINGS = ("preset", "reference", "flop_budget", "model", "data", "experiment")
"""The results document's keys the report reads unchanged."""


def nats(d: dict[str, Any] | None) -> str:
    """A same-seed NLL difference in nats per token with its interval (and Holm's verdict when
    it has one)."""
    if d is None:
        return "n/a"
    text = f"{d['mean']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}]"
    return f"{text} {d['holm']}" if "holm" in d else text


def nll_cell(cell: dict[str, Any]) -> str:
    """An NLL over seeds as 'mean [low, high]' (no interval with one seed)."""
    if cell["low"] is None:
        return f"{cell['mean']:.4f}"
    return f"{cell['mean']:.4f} [{cell['low']:.4f}, {cell['high']:.4f}]"


def analysed(numbers: dict[str, Any], compare_depths: list[int]) -> dict[str, Any]:
    """`analyse_nll_arms` of a report's numbers, read with its primaries."""
    e = numbers["experiment"]
    primary: list[Claim] = [NLL_CLAIMS.read(p) for p in e["nll_primary"]]
    return analyse_nll_arms(
        numbers["runs"], e["depths"], numbers["reference"], compare_depths, primary
    )


def primary_table(a: dict[str, Any]) -> str:
    rows = []
    for p in a["primary"]:
        bar = "" if p["bar"] is None else f" (bar {p['bar']:+.4f})"
        rows.append(
            [
                p["name"],
                f"{p['a']} K={p['a_depth']}",
                f"{p['b']} K={p['b_depth']}",
                nats(p["difference"]),
                f"{p['verdict']}{bar}",
            ]
        )
    head = ["comparison", "a", "b", "a - b, nats/token [95%]", "verdict"]
    return "\n".join(table(head, rows, compact=True))


def guide_table(numbers: dict[str, Any], a: dict[str, Any]) -> str:
    """Finishing tokens against what they buy: NLL at 1, K, k_max and the deepest depth, each
    finish minus the base (same seed) with its 95% interval."""
    e = numbers["experiment"]
    depths = list(dict.fromkeys([1, e["depth"], e["k_max"], max(e["depths"])]))
    depths = [d for d in depths if d in e["depths"]]
    names = labels(numbers)
    rows = []
    for arm in a["arms"]:
        spent = sorted({r["finishing_tokens"] for r in numbers["runs"].values() if r["arm"] == arm})
        shown = f"{spent[0]:,}" if spent[0] == spent[-1] else f"{spent[0]:,}-{spent[-1]:,}"
        row = [nll_cell(a["nll"][arm][str(d)]) for d in depths]
        if arm != a["reference"]:
            versus = a["versus_reference"][arm]
            row = [
                f"{c} ({nats(versus.get(f'nll@{d}'))})" for c, d in zip(row, depths, strict=True)
            ]
        rows.append([names.get(arm, arm), shown, *row])
    head = ["finishing", "tokens", *(f"NLL K={d}" for d in depths)]
    return "\n".join(table(head, rows, compact=True))


def depth_table(a: dict[str, Any], depths: list[int], names: dict[str, str]) -> str:
    """Rows: arms; columns: depths; cells: the NLL over seeds."""
    rows = [
        [names.get(arm, arm), *(nll_cell(a["nll"][arm][str(d)]) for d in depths)]
        for arm in a["arms"]
    ]
    return "\n".join(table(["held-out NLL", *(f"K={d}" for d in depths)], rows, compact=True))


def report_markdown(numbers: dict[str, Any]) -> str:
    """report.md from report.json's numbers (or results.json, which holds them all)."""
    e, data = numbers["experiment"], numbers["data"]
    a = analysed(numbers, e["compare_depths"])
    names = labels(numbers)
    model = numbers["model"]
    lines = [
        "# Finishing a model trained at one depth, on text",
        "",
        f"transformers' {model['architecture']}, trained at a fixed depth K = {e['depth']} with "
        f"seeds {', '.join(map(str, a['seeds']))} to {numbers['flop_budget']:.3g} modeled "
        f"training FLOPs on the text of `{data['name']}` (rows of {data['seq_len']} tokens), "
        "then branched at its last checkpoint into finishing stages of "
        f"{', '.join(f'{100 * f:g}%' for f in sorted(e['fractions']))} of its tokens, each step "
        f"at a depth uniform in 1..{e['k_max']}, "
        + rates_sentence(e)
        + control_sentence(e)
        + f"Every run is scored by its held-out NLL per token on {e['sequences']} rows of the "
        "validation split drawn by its seed (every arm of a seed on the same rows). "
        + produced_by(f"finishing --preset {numbers['preset']}", numbers),
        "",
        "NLL is in nats per token; lower is better, so a negative difference says the first arm "
        "predicts the held-out text better. Intervals are 95% t-intervals over seeds (each seed "
        "with its own draw of held-out rows, so they cover the held-out sample too); a "
        "comparison is the same-seed difference. The primary comparisons were named in the "
        "preset before the runs, each decided by its own interval; every other difference is "
        f"exploratory, {corrected_over(a['exploratory'])}. "
        + holm_reach(a["exploratory"], lambda x: f"{x:.4f} nats"),
        "",
        "## Primary comparisons",
        "",
        primary_table(a),
        "",
        "## What finishing buys",
        "",
        guide_table(numbers, a),
        "",
        "## Held-out NLL by depth",
        "",
        f"![held-out NLL by depth]({FIGURE})",
        "",
        depth_table(a, e["depths"], names),
        "",
        "## Every finish against its base",
        "",
        versus_table(a, names, nats),
        "",
    ]
    return "\n".join(lines)


def plot_nll(a: dict[str, Any], depths: list[int], names: dict[str, str], path: Path) -> None:
    """Held-out NLL against depth, one line per arm (mean, 95% band shaded)."""
    fig = Figure(figsize=(5.5, 3.8), layout="constrained")
    ax = fig.subplots()
    for arm in a["arms"]:
        cells = [a["nll"][arm][str(d)] for d in depths]
        (line,) = ax.plot(depths, [c["mean"] for c in cells], marker="o", ms=3, label=names[arm])
        if cells[0]["low"] is not None:
            lows, highs = [c["low"] for c in cells], [c["high"] for c in cells]
            ax.fill_between(depths, lows, highs, color=line.get_color(), alpha=0.15, lw=0)
    ax.set_xlabel("serving depth (passes)")
    ax.set_ylabel("held-out NLL (nats/token)")
    ax.legend(fontsize=7)
    save_figure(fig, path)


@dataclass(frozen=True)
class NllReport:
    """What the study writes beside its results on text: report.json (the settings, and of every
    run its cost, identity and scores), report.md rendered from it, and the figure."""

    format: str = "fixedfirst-finishing-nll-report"

    def numbers(self, results: dict[str, Any]) -> dict[str, Any]:
        return {
            "format": self.format,
            "version": 1,
            **{key: results[key] for key in SETTINGS},
            "wall_clock_s": results.get("wall_clock_s"),
            "workers": results.get("workers"),
            "runs": {
                name: {key: r[key] for key in (*RUN_FIELDS, "scores")}
                for name, r in results["runs"].items()
            },
        }

    def write(self, results: dict[str, Any], out: Path) -> list[Path]:
        """The figure, OUT/report.json and OUT/report.md made from it; the files written."""
        depths = results["experiment"]["depths"]
        plot_nll(results["analysis"], depths, labels(results), out / FIGURE)
        write_numbers_and_report(out, self.numbers(results), report_markdown)
        return [out / FIGURE, out / "report.json", out / "report.md"]


NLL_REPORT = NllReport()
