"""Fixed-first on a looped mixture-of-experts: transformers' Inkling2LoopForCausalLM on the chains
task, at matched modeled FLOPs (issue 58; docs/guides/any-loop.md says how to run it).

Four schedules, each trained with every seed of the preset to one modeled FLOP budget (the
model's compute model is measured, compute/measured.py): fixed at 2 passes, uniform over 1..6,
and fixed-first from 2 passes switching at 0.67 and at 0.8 into uniform 1..6. Each finished run
is scored at passes 1..12 (twice the training maximum) by difficulty (studies/kit/depth_scoring.py),
and its router measured: each loop layer's expert shares at every pass, at the end and, for a
fixed-first run, at its switch (routing.py). `depth_arms.analyse_arms` reads the scores by the
chains study's rules, the preset's primary comparisons decided each by its own interval.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar

from fixedfirst.config import TransformersModelConfig
from fixedfirst.errors import UserError
from fixedfirst.schedules import describe
from fixedfirst.studies.kit.claims import Claim
from fixedfirst.studies.kit.depth_arms import BAND_CLAIMS, DepthArmsSettings, arms_results
from fixedfirst.studies.kit.depth_scoring import score_by_depth
from fixedfirst.studies.kit.presets import Arm, Evaluated, PresetStudy, named_schedule
from fixedfirst.studies.kit.results import cost, scored_bands, scoring
from fixedfirst.studies.kit.runs import PlannedRun
from fixedfirst.studies.kit.workers import Job

MOE_SCHEDULES = {
    name: named_schedule(name, 6)
    for name in ("fixed-2", "uniform-1-6", "fixed-first-2-0.67", "fixed-first-2-0.8")
}
"""Arm name -> schedule (issue 58): 2 passes is Inkling2Loop's training depth scaled to this
model, 1..6 three times it."""
REFERENCE = "uniform-1-6"
"""The arm every other is compared with at matched FLOPs."""


@dataclass
class MoeSettings(DepthArmsSettings):
    """The `[experiment]` section of a looped mixture-of-experts preset."""

    SEQUENCES: ClassVar[tuple[str, ...]] = ("sequences", "router_sequences")

    flops: float = 1e12
    seeds: list[int] = field(default_factory=lambda: [200, 201, 202])
    schedules: list[str] = field(default_factory=lambda: list(MOE_SCHEDULES))
    """Which arms to train: fixed-2, uniform-1-6, fixed-first-2-0.67, fixed-first-2-0.8."""
    depths: list[int] = field(default_factory=lambda: list(range(1, 13)))
    compare_depths: list[int] = field(default_factory=lambda: [1, 2, 6, 12])
    sequences: int = 256
    router_sequences: int = 64
    """Evaluation sequences whose tokens the router shares are counted on."""
    primary: list[Annotated[Claim, BAND_CLAIMS]] = field(default_factory=list)

    def check(self) -> None:
        unknown = [n for n in self.schedules if n not in MOE_SCHEDULES]
        if REFERENCE not in self.schedules or unknown:
            raise UserError(
                f"{self.SECTION}.schedules: choose from {', '.join(MOE_SCHEDULES)}, {REFERENCE} "
                f"among them (the reference), got {self.schedules}"
            )


def score_job(run: Path, settings: MoeSettings) -> dict[str, Any]:
    """A finished run's accuracy by depth and its router shares (each cached beside the run)."""
    from fixedfirst.studies.moe.routing import router_by_pass

    return {
        "scores": score_by_depth(run, settings.depths, settings.sequences),
        "router": router_by_pass(run, max(settings.depths), settings.router_sequences),
    }


class MoeStudy(PresetStudy[MoeSettings]):
    """Every arm of MOE_SCHEDULES on a looped mixture-of-experts, each run scored and its router
    measured once it has finished."""

    name = "moe"
    evaluated = "scoring"
    collecting = "scoring"
    PACKAGE = "fixedfirst.studies.moe"
    PRESETS = ("default", "smoke")
    SETTINGS = MoeSettings
    DATA_KIND = "chains"

    def arms(self) -> dict[str, Arm]:
        return {name: Arm(MOE_SCHEDULES[name]) for name in self.experiment.schedules}

    def runs(self) -> list[PlannedRun]:
        runs = super().runs()
        if not isinstance(runs[0].config.model, TransformersModelConfig):
            raise UserError(
                'a moe preset trains a transformers looped model: [model] kind = "transformers"'
            )
        return runs

    def evaluations(self, planned: PlannedRun, run: Path) -> list[Job]:
        e, depths = self.experiment, (1, 2, 6)
        return [scoring(planned.name, run, score_job, e, bands=scored_bands, depths=depths)]

    def results(self, evaluated: list[Evaluated]) -> dict[str, Any]:
        """Every run's cost, scores and router shares, and their analysis."""
        from fixedfirst.studies.moe.router_analysis import analyse_router

        e = self.experiment
        runs = {}
        for run in evaluated:
            runs[run.outcome.name] = {
                "arm": run.arm,
                "schedule": describe(run.config.schedule),
                "seed": run.seed,
                **cost(run.outcome.summary),
                "switch_step": (run.outcome.summary.get("switch") or {}).get("step"),
                "scores": run.values[0]["scores"],
                "router": run.values[0]["router"],
            }
        first = self.run_config(e.schedules[0], e.seeds[0])
        document = arms_results("fixedfirst-moe-results", self.preset, REFERENCE, e, first, runs)
        return {**document, "router": analyse_router(runs)}

    def write(self, results: dict[str, Any], out: Path) -> list[Path]:
        from fixedfirst.studies.moe.report import REPORT

        return REPORT.write(results, out)


load_preset = MoeStudy.load
"""A shipped preset or a path to a preset TOML, plus `--set` overrides."""
