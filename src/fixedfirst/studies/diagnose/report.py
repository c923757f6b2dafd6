"""The diagnostic's report (printed, and written as report.md): depth-averaged benefit per u,
then per band and per serving depth; made from report.json alone (`report_numbers`: the setup
and, per u, the benefit of every training batch on every held-out sequence at every serving
depth, from which `report_markdown` draws every interval again, so a reader of report.json can
recompute each one)."""

from __future__ import annotations

from typing import Any

import numpy as np

from fixedfirst.studies.diagnose.summary import (
    IntervalSettings,
    benefit_intervals,
    contained_from,
)

NUMBERS_FORMAT = "fixedfirst-diagnose-report"
NUMBERS_VERSION = 2
"""Version 1 (before 2026-12-04) held the intervals only; version 2 the benefits they come from."""
SETUP_FIELDS = (
    "run",
    "schedule",
    "depths",
    "serving_depths",
    "batches",
    "rms_reference",
    "interval",
)


def report_numbers(results: dict[str, Any], benefit_per_sequence: np.ndarray) -> dict[str, Any]:
    """What the report is computed from: the setup from results.json, the held-out sequences'
    scored tokens (their weights), the bands, and per u its step, learning rate and the benefit
    per (training batch, held-out sequence, serving depth) in nats per token
    (`benefit_per_sequence`, the array beside results.json), every digit kept."""
    numbers: dict[str, Any] = {
        "format": NUMBERS_FORMAT,
        "version": NUMBERS_VERSION,
        **{key: results[key] for key in SETUP_FIELDS},
        "checkpoint": {key: results["checkpoint"][key] for key in ("step", "tags")},
        "heldout": {
            "sequences": results["heldout"]["sequences"],
            "tokens_per_sequence": results["heldout"]["tokens_per_sequence"],
        },
        "bands": results["bands"],
        "benefit_axes": ["training batch", "held-out sequence", "serving depth"],
    }
    numbers["results"] = [
        {
            "u": row["u"],
            "step": row["step"],
            "lr": row["lr"],
            "benefit_per_sequence": benefit_per_sequence[index].tolist(),
        }
        for index, row in enumerate(results["results"])
    ]
    return numbers


def with_intervals(numbers: dict[str, Any]) -> dict[str, Any]:
    """report.json's numbers with every interval drawn from its benefits (`benefit_intervals`,
    as the command drew them) and the headline's u from them; results.json, or a version 1
    report.json, already holds its intervals and is returned as it is."""
    rows = numbers["results"]
    if not rows or "benefit_per_sequence" not in rows[0]:
        return numbers
    i = numbers["interval"]
    settings = IntervalSettings(i["level"], i["resamples"], i["seed"])
    tokens = np.asarray(numbers["heldout"]["tokens_per_sequence"], dtype=np.float64)
    bands = numbers["bands"]
    drawn = [
        {
            **{key: row[key] for key in ("u", "step", "lr")},
            **benefit_intervals(
                np.asarray(row["benefit_per_sequence"], dtype=np.float64),
                tokens,
                numbers["serving_depths"],
                bands,
                settings,
            ),
        }
        for row in rows
    ]
    return {
        **numbers,
        "results": drawn,
        "contains_zero_from_u": contained_from(drawn),
        "contains_zero_from_u_by_band": {name: contained_from(drawn, name) for name in bands},
    }


def _signed(x: float) -> str:
    return f"{x:+.2e}"


def _with_interval(stats: dict[str, Any]) -> str:
    return f"{_signed(stats['mean'])} [{_signed(stats['low'])}, {_signed(stats['high'])}]"


def _from_u(u: int | None, last: int) -> str:
    if u is None:
        return f"no u from which every later interval contains 0 (u = {last} excludes it)"
    return f"every interval from u = {u} on contains 0"


def headline(results: dict[str, Any]) -> list[str]:
    """What the intervals support: for the depth average and for each band, the first u from
    which every later measured interval contains zero (a lone interval containing zero between
    ones that do not is not a finding), and the sign of the last u's interval when it excludes
    zero."""
    rows = results["results"]
    last = rows[-1]
    deep = results["depths"]["deep"]

    def verdict(u: int | None, interval: dict[str, Any]) -> str:
        text = _from_u(u, last["u"])
        if u is None:
            favoured = f"depth {deep}" if interval["mean"] > 0 else "the shallow depth"
            text += f"; at u = {last['u']} it favours {favoured}"
        return text

    lines = [
        "depth-averaged benefit: " + verdict(results["contains_zero_from_u"], last["depth_average"])
    ]
    for name, u in results.get("contains_zero_from_u_by_band", {}).items():
        lines.append(f"serving depths {name}: " + verdict(u, last["bands"][name]))
    return lines


def report_markdown(numbers: dict[str, Any]) -> str:
    """report.md (what the command prints) from report.json's numbers, or results.json's."""
    return format_tables(with_intervals(numbers)) + "\n"


def format_tables(results: dict[str, Any]) -> str:
    shallow, deep = results["depths"]["shallow"], results["depths"]["deep"]
    interval = results["interval"]
    level = f"{100 * interval['level']:g}%"
    ckpt = results["checkpoint"]
    tags = f" ({', '.join(ckpt['tags'])})" if ckpt["tags"] else ""
    lines = [
        f"update diagnostic: {results['run']} from step {ckpt['step']}{tags}, "
        f"{results['schedule']}",
        f"Benefit(k) = NLL_k after a depth-{shallow} update - NLL_k after a depth-{deep} update "
        f"(positive favours depth {deep}); RMS matched to the "
        f"{results['rms_reference'].replace('-', ' ')}; "
        f"{results['batches']} training batches x {results['heldout']['sequences']} held-out "
        f"sequences per u",
        f"intervals: {level} {interval['kind']} ({interval['resamples']} resamples); they cover "
        f"{interval['covers']}",
        "",
        f"| u | step | lr | depth-averaged benefit | {level} interval | contains 0 |",
        "| ---: | ---: | ---: | ---: | :---: | :---: |",
    ]
    for row in results["results"]:
        a = row["depth_average"]
        zero = "yes" if a["contains_zero"] else "no"
        lines.append(
            f"| {row['u']} | {row['step']} | {row['lr']:.2e} | {_signed(a['mean'])} | "
            f"[{_signed(a['low'])}, {_signed(a['high'])}] | {zero} |"
        )
    lines += ["", *headline(results), ""]
    bands = results.get("bands", {})
    if bands:
        lines += [
            f"benefit averaged within serving-depth bands: mean [{level} interval]",
            "",
            "| u | " + " | ".join(f"k in {name}" for name in bands) + " |",
            "| ---: |" + " :---: |" * len(bands),
        ]
        for row in results["results"]:
            cells = [_with_interval(row["bands"][name]) for name in bands]
            lines.append(f"| {row['u']} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += [*uncertainty_sources(results), ""]
    lines += [
        f"benefit by serving depth: mean [{level} interval]",
        "",
        "| k | " + " | ".join(f"u={row['u']}" for row in results["results"]) + " |",
        "| ---: |" + " :---: |" * len(results["results"]),
    ]
    for k in results["serving_depths"]:
        cells = [_with_interval(row["benefit"][str(k)]) for row in results["results"]]
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def uncertainty_sources(results: dict[str, Any]) -> list[str]:
    """Where the uncertainty of the depth-averaged benefit comes from: its bootstrap standard
    error with only the training batches resampled (all an interval over batches sees), only
    the held-out sequences, and both (the reported intervals)."""
    lines = [
        "standard error of the depth-averaged benefit, by what is resampled",
        "",
        "| u | batches only | held-out sequences only | both (the intervals) |",
        "| ---: | ---: | ---: | ---: |",
    ]
    for row in results["results"]:
        a = row["depth_average"]
        lines.append(
            f"| {row['u']} | {a['se_batches_only']:.2e} | {a['se_heldout_only']:.2e} | "
            f"{a['se']:.2e} |"
        )
    return lines
