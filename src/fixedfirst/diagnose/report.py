"""The diagnostic's printed tables: depth-averaged benefit per u, then benefit per serving depth."""

from __future__ import annotations

from typing import Any


def _signed(x: float) -> str:
    return f"{x:+.2e}"


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
        f"{results['batches']} batches per u; {level} {interval['kind']}",
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
    first = results["first_u_contains_zero"]
    lines += [
        "",
        "first u whose depth-averaged interval contains 0: "
        + ("none of those measured" if first is None else str(first))
        + (
            f" (and every u from {results['contains_zero_from_u']} on)"
            if results["contains_zero_from_u"] is not None
            else ""
        ),
        "",
        f"benefit by serving depth: mean ± {level} half-width",
        "",
        "| k | " + " | ".join(f"u={row['u']}" for row in results["results"]) + " |",
        "| ---: |" + " ---: |" * len(results["results"]),
    ]
    for k in results["serving_depths"]:
        cells = []
        for row in results["results"]:
            b = row["benefit"][str(k)]
            cells.append(f"{_signed(b['mean'])} ± {(b['high'] - b['low']) / 2:.1e}")
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
