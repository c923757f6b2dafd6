"""The table of a regime probe (a sweep under configs/probes/), with its criterion checked per run.

    python scripts/probe_table.py lm DIR/results.json --out docs/probes/lm-depth.md
    python scripts/probe_table.py bios DIR/results.json --ceiling 38.95 \
        --out docs/probes/bios-loop.md

`lm`: held-out NLL at serving depths 1, 2, 4, 8, 16, 32, 64 of each uniform-trained run; the
criterion (depth is used) is NLL at 16 at least 1% below depth 4 and at least 4% below depth 1.
`bios`: recalled bits per person at the same depths of each fixed K=4 run, from the sweep's task
metric; the criterion (recall runs through the loop) is recall at depth 4 at least 80% of the
ceiling and recall at depth 1 at most 50% of that at depth 4.

The sweep's results.json is copied beside the table (`--out` with .json), so that the table is
checked against the numbers it was made from (tests/test_probes.py).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

DEPTHS = (1, 2, 4, 8, 16, 32, 64)
LM_GAIN_OVER_4 = 0.01
LM_GAIN_OVER_1 = 0.04
BIOS_CEILING_SHARE = 0.8
BIOS_SHALLOW_SHARE = 0.5


def _describe(run: dict[str, Any]) -> str:
    return f"{run['steps']} steps, {run['tokens']:,} tokens"


def lm_rows(runs: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| run | training | "
        + " | ".join(f"NLL K={d}" for d in DEPTHS)
        + " | 16 vs 4 | 16 vs 1 | depth used |",
        "| --- | --- |" + " --- |" * (len(DEPTHS) + 3),
    ]
    for run in runs:
        nll = {int(d): v for d, v in run["nll_by_depth"].items()}
        over_4 = 1 - nll[16] / nll[4]
        over_1 = 1 - nll[16] / nll[1]
        used = over_4 >= LM_GAIN_OVER_4 and over_1 >= LM_GAIN_OVER_1
        cells = " | ".join(f"{nll[d]:.4f}" for d in DEPTHS)
        lines.append(
            f"| {run['name']} | {_describe(run)} | {cells} | {100 * over_4:.2f}% below | "
            f"{100 * over_1:.2f}% below | {'yes' if used else 'no'} |"
        )
    return lines


def bios_rows(runs: list[dict[str, Any]], ceiling: float) -> list[str]:
    lines = [
        "| run | training | "
        + " | ".join(f"K={d}" for d in DEPTHS)
        + " | K=4 of ceiling | K=1 of K=4 | through the loop |",
        "| --- | --- |" + " --- |" * (len(DEPTHS) + 3),
    ]
    for run in runs:
        bits = {int(d): v for d, v in run["task_scores"].items()}
        at4 = bits[4] / ceiling
        at1 = bits[1] / bits[4] if bits[4] > 0 else float("inf")
        holds = at4 >= BIOS_CEILING_SHARE and at1 <= BIOS_SHALLOW_SHARE
        cells = " | ".join(f"{bits[d]:.1f}" for d in DEPTHS)
        lines.append(
            f"| {run['name']} | {_describe(run)} | {cells} | {100 * at4:.0f}% | {100 * at1:.0f}% "
            f"| {'yes' if holds else 'no'} |"
        )
    return lines


def table(kind: str, results: dict[str, Any], ceiling: float | None = None) -> str:
    runs = results["runs"]
    if kind == "lm":
        body = lm_rows(runs)
        legend = (
            "NLL: held-out nats per byte at serving depth K (the sweep's final evaluation). "
            f"Depth is used when NLL at K=16 is at least {100 * LM_GAIN_OVER_4:.0f}% below K=4 "
            f"and at least {100 * LM_GAIN_OVER_1:.0f}% below K=1."
        )
    elif kind == "bios":
        if ceiling is None:
            raise ValueError("a bios probe table needs the ceiling (bits per person)")
        body = bios_rows(runs, ceiling)
        legend = (
            "Recalled bits per person at serving depth K (the sweep's task metric, every person). "
            f"Recall runs through the loop when K=4 recalls at least "
            f"{100 * BIOS_CEILING_SHARE:.0f}% of the ceiling ({ceiling:.2f} bits) and K=1 at most "
            f"{100 * BIOS_SHALLOW_SHARE:.0f}% of what K=4 recalls."
        )
    else:
        raise ValueError(f"kind must be 'lm' or 'bios', got {kind!r}")
    return "\n".join([*body, "", legend]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("lm", "bios"))
    parser.add_argument("results", type=Path, help="the probe sweep's results.json")
    parser.add_argument("--out", type=Path, required=True, help="the table (.md)")
    parser.add_argument("--ceiling", type=float, help="bios: the ceiling in bits per person")
    args = parser.parse_args()
    results = json.loads(args.results.read_text())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(table(args.kind, results, args.ceiling))
    shutil.copyfile(args.results, args.out.with_suffix(".json"))
    print(f"wrote {args.out} and {args.out.with_suffix('.json')}")


if __name__ == "__main__":
    main()
