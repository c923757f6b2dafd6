"""Where a bios study's fixed-first runs switch, in FLOPs: the share of the FLOP budget each run
has spent when its finishing stage starts.

    python scripts/switch_flops.py docs/figures/bios-loop-report.json \
        docs/figures/bios-loop-fresh-report.json --out docs/figures/bios-loop-switch-flops.md

A switch fraction counts optimizer steps (0.67 of them), the study's snapshots count FLOPs (15%
and 45% of the budget), and a fixed step is cheaper than a finishing one, so the two scales
differ: a run whose switch is at 0.67 of its steps may already be finishing at 45% of its FLOPs.
Each run's plan is rebuilt from the preset its report names (`schedules`, `compute`: the run's
own depth draws) and must cost what the report says the run cost, to the FLOP, before its switch
is read; a report whose runs the preset does not rebuild is refused. Writes the table to OUT
(and prints it).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from fixedfirst.compute.plan import plan_run
from fixedfirst.studies.bios.experiment import load_preset

ROOT = Path(__file__).resolve().parents[1]


def preset_path(preset: str) -> str:
    """A report's preset as `load_preset` takes it: a shipped name, or a path from the root."""
    return preset if "/" not in preset else str(ROOT / preset)


def switch_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per fixed-first run of a bios report: its steps, switch step, and the share of the
    budget spent before the switch; each run's plan checked against the report's FLOPs."""
    study = load_preset(preset_path(report["preset"]))
    budget = report["flop_budget"]
    rows = []
    for name, run in report["runs"].items():
        config = study.run_config(run["schedule"], int(name.rsplit("-seed", 1)[1]))
        if config.schedule.kind != "fixed-first":
            continue
        plan = plan_run(config)
        if plan.total_steps != run["steps"] or plan.flops != run["flops"]:
            raise SystemExit(
                f"{name}: the preset plans {plan.total_steps} steps and {plan.flops:.6e} FLOPs, "
                f"the report says {run['steps']} and {run['flops']:.6e}: not the same run"
            )
        switch = plan.switch_step
        assert switch is not None
        fixed = sum(plan.step_flops(plan.depth(step)) for step in range(switch))
        rows.append(
            {"run": name, "arm": run["schedule"], "steps": plan.total_steps}
            | {"switch": switch, "share": fixed / budget}
        )
    return rows


def markdown(path: str, report: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    snapshots = [f for f in report["budget_fractions"] if f < 1]
    lines = [
        f"## {path} (preset {report['preset']})",
        "",
        "| run | steps | switch step | FLOPs before the switch, share of the budget | "
        + " | ".join(f"at {f:.0%} of the budget" for f in snapshots)
        + " |",
        "| --- | --- | --- | --- | " + " | ".join("---" for _ in snapshots) + " |",
    ]
    for r in rows:
        stages = ["fixed" if f < r["share"] else "finishing" for f in snapshots]
        cells = [r["run"], str(r["steps"]), str(r["switch"]), f"{100 * r['share']:.1f}%", *stages]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for arm in dict.fromkeys(r["arm"] for r in rows):
        shares = [100 * r["share"] for r in rows if r["arm"] == arm]
        seeds = ", ".join(r["run"].rsplit("-seed", 1)[1] for r in rows if r["arm"] == arm)
        lines.append(
            f"- {arm}, seeds {seeds}: the fixed stage ends at {min(shares):.1f}-"
            f"{max(shares):.1f}% of the FLOP budget."
        )
    return "\n".join(lines) + "\n"


def document(paths: list[str], out: str) -> str:
    """The whole Markdown file for the reports at `paths` (relative to the root)."""
    command = " ".join(["python scripts/switch_flops.py", *paths, "--out", out])
    parts = [
        "# Where fixed-first switches, in FLOPs",
        "",
        f"`{command}`: each fixed-first run's plan rebuilt from its preset, checked against the "
        "FLOPs its report gives, and the share of the FLOP budget it spends before its switch "
        "(a switch fraction counts steps; the snapshots count FLOPs).",
        "",
    ]
    for path in paths:
        report = json.loads((ROOT / path).read_text())
        parts.append(markdown(path, report, switch_rows(report)))
    return "\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", help="bios report.json files (docs/figures/)")
    parser.add_argument("--out", required=True, help="the Markdown table to write")
    args = parser.parse_args()
    text = document(args.reports, args.out)
    Path(args.out).write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
