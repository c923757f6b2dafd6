"""The pieces every study's report.md is built of: its tables, the primary and exploratory
sections, the line that says how it was made, and the sentence that counts what Holm's
correction kept.

Each report is remade from its report.json to the byte (tests/test_committed_reports.py), so a
piece here writes exactly what the reports have always said; a study passes its own words.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

NONE_NAMED = "None named in this preset."


def table(head: Sequence[str], rows: Sequence[Sequence[Any]], compact: bool = False) -> list[str]:
    """A Markdown table's lines: the header, its rule (`| --- |`, or `|---|` compact) and a line
    per row, each cell as it is given (formatted by the caller)."""
    rule = "|" + "---|" * len(head) if compact else "| " + " | ".join("---" for _ in head) + " |"
    return [
        "| " + " | ".join(head) + " |",
        rule,
        *("| " + " | ".join(str(cell) for cell in row) + " |" for row in rows),
    ]


def primary_section(claims: str, sentences: Sequence[str]) -> list[str]:
    """## Primary `claims` (named before the runs): a sentence each, or that the preset names
    none."""
    return [
        f"## Primary {claims} (named before the runs)",
        "",
        *([f"- {s}" for s in sentences] or [NONE_NAMED]),
        "",
    ]


def claimed(claim: Mapping[str, Any], what: str, value: str, side: str) -> str:
    """A primary claim's sentence: its name, what it measures and the value over seeds, the side
    claimed and its verdict (none with too few seeds)."""
    verdict = claim["verdict"] or "no verdict"
    return f"{claim['name']}: {what}: {value}; claimed {side}: {verdict}."


def exploratory_section(family: Mapping[str, int], sentences: Sequence[str]) -> list[str]:
    """## What else the numbers show: the exploratory findings, with the size of the family
    Holm's method corrected over (where it has one)."""
    over = f" (Holm over {family['size']})" if family["size"] else ""
    return [
        f"## What else the numbers show: exploratory{over}",
        "",
        *[f"- {s}" for s in sentences],
        "",
    ]


def kept_by_holm(family: Mapping[str, int]) -> str:
    """How many of an exploratory family's differences exclude zero, before and after Holm's
    correction."""
    return (
        f"{family['uncorrected']} exclude zero uncorrected, {family['corrected']} after the "
        "correction"
    )


def corrected_over(family: Mapping[str, int]) -> str:
    """The exploratory family as a clause: its size and what the correction kept."""
    return (
        f"corrected over all {family['size']} by Holm's method ({family['uncorrected']} have an "
        f"interval off zero, {family['corrected']} keep a side after the correction)"
    )


def holm_reach(family: Mapping[str, Any], unit: Callable[[float], str]) -> str:
    """What an exploratory family could have declared at all: the |t| Holm's first threshold
    needs over its size, and the smallest mean difference that passes it with the spread its
    seeds showed (`unit` writes a difference in the report's unit); and how many differences,
    zero in every seed, were left out. Empty for a family of none."""
    if not family["size"] or family.get("t_needed") is None:
        return ""
    size, least = family["size"], family.get("least_declarable")
    reach = (
        f"with these seeds' spread no mean difference smaller than {unit(least)} could have "
        "been declared (the difference whose seeds agree most)"
        if least is not None
        else "no difference has a spread to test"
    )
    zero = family.get("zero", 0)
    left_out = (
        f"; {zero} {'difference' if zero == 1 else 'differences'} zero in every seed "
        f"{'is' if zero == 1 else 'are'} left out of it"
        if zero
        else ""
    )
    return (
        f"Holm's first threshold over {size} differences (p <= 5%/{size}) needs |t| >= "
        f"{family['t_needed']:.1f} on {family['seeds'] - 1} degrees of freedom: {reach}{left_out}."
    )


def produced_by(command: str, numbers: Mapping[str, Any] | None = None) -> str:
    """ "Produced by `fixedfirst COMMAND`", and, where a study's report keeps its wall-clock and
    processes (`numbers`), in how many minutes on what."""
    wall = (numbers or {}).get("wall_clock_s") or {}
    workers = (numbers or {}).get("workers") or {}
    spent = (
        f" in {sum(wall.values()) / 60:.0f} minutes on {workers['processes']} process(es) of "
        f"{workers['threads_each']} thread(s)."
        if wall and workers
        else "."
    )
    return f"Produced by `fixedfirst {command}`{spent}"


def runs_section(
    runs: Mapping[str, Mapping[str, Any]], budget: float, seed: bool, wall: str
) -> list[str]:
    """## Runs: every run's cost against the study's FLOP budget: schedule (and seed), steps,
    tokens, modeled FLOPs, their share of the budget and the wall-clock (`wall`: its column's
    name)."""
    head = ["run", "schedule", *(["seed"] if seed else []), "steps", "tokens", "modeled FLOPs"]
    rows = [
        [
            name,
            r["description"],
            *([r["seed"]] if seed else []),
            r["steps"],
            f"{r['tokens']:,}",
            f"{r['flops']:.4e}",
            f"{100 * r['flops'] / budget:.2f}%",
            f"{r['wall_s']:.0f}",
        ]
        for name, r in runs.items()
    ]
    return ["## Runs", "", *table([*head, "of the budget", wall], rows), ""]
