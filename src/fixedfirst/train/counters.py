"""What a run has spent so far: steps, tokens, modeled FLOPs and wall-clock, in all and per
phase of the schedule (fixed / finish, ...). Saved in every checkpoint's meta.json, so a resumed
run goes on counting where it stopped, and written at the end as the run's summary.json.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fixedfirst.compute.plan import RunPlan


@dataclass
class PhaseTotals:
    steps: int = 0
    tokens: int = 0
    flops: float = 0.0
    wall: float = 0.0


@dataclass
class Counters:
    """Progress of the run so far; saved in every checkpoint."""

    step: int = 0
    tokens: int = 0
    flops: float = 0.0
    wall: float = 0.0
    phases: dict[str, PhaseTotals] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "tokens": self.tokens,
            "flops": self.flops,
            "wall": self.wall,
            "phases": {k: vars(v) for k, v in self.phases.items()},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Counters:
        phases = {k: PhaseTotals(**v) for k, v in d.get("phases", {}).items()}
        return cls(int(d["step"]), int(d["tokens"]), float(d["flops"]), float(d["wall"]), phases)

    def position(self) -> dict[str, Any]:
        """Where the run is (steps, tokens and modeled FLOPs so far): the start of each record
        made at a step boundary."""
        return {"step": self.step, "tokens": self.tokens, "flops": self.flops}

    def add_step(self, phase: str, tokens: int, flops: float, seconds: float) -> None:
        """Count one finished optimizer step of `phase`."""
        self.step += 1
        self.tokens += tokens
        self.flops += flops
        self.wall += seconds
        totals = self.phases.setdefault(phase, PhaseTotals())
        totals.steps += 1
        totals.tokens += tokens
        totals.flops += flops
        totals.wall += seconds

    def summary(self, schedule: str, budget: RunPlan) -> dict[str, Any]:
        """The closing summary (summary.json): what was spent against what was planned."""
        return {
            "schedule": schedule,
            "steps": self.step,
            "total_steps": budget.total_steps,
            "tokens": self.tokens,
            "flops": self.flops,
            "planned_flops": budget.flops,
            "expected_flops": budget.expected_flops,
            "flop_budget": budget.flop_budget,
            "wall": self.wall,
            "phases": {k: vars(v) for k, v in self.phases.items()},
        }


def format_summary(summary: dict[str, Any]) -> str:
    finished = summary["steps"] == summary["total_steps"]
    state = "done" if finished else f"paused at step {summary['steps']}/{summary['total_steps']}"
    lines = [
        f"{state}: {summary['schedule']}: {summary['steps']} steps, {summary['tokens']:,} tokens, "
        f"{summary['flops']:.3e} modeled FLOPs, {summary['wall']:.1f} s training wall-clock"
    ]
    for name, p in summary["phases"].items():
        share = p["flops"] / summary["flops"] if summary["flops"] else 0.0
        lines.append(
            f"  {name:<18s} {p['steps']:>7d} steps {p['tokens']:>12,} tokens "
            f"{p['flops']:.3e} FLOPs ({100 * share:.0f}%) {p['wall']:8.1f} s"
        )
    switch = summary.get("switch")
    if switch and switch.get("auto") and switch["step"] is not None:
        why = "its rule fired" if switch["reason"] == "rule" else "the ceiling"
        probes = f", probes {switch['probe_flops']:.3e} FLOPs" if switch["probes"] else ""
        lines.append(
            f"  auto switch ({switch['rule']}) at step {switch['step']} "
            f"({100 * switch['fraction']:.1f}% of the run): {why}{probes}"
        )
    lines.append(f"  on {summary['data']['about']}")
    return "\n".join(lines)
