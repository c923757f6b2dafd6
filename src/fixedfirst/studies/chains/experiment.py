"""Depth that matters: every schedule of the paper on the chains task, at matched modeled FLOPs.

Fixed K=4, uniform 1..16, fixed-first (K0=4, switch 0.8; K0=2, switch 0.67) and the progressive
curriculum, each trained with every seed of the preset to the same modeled training-FLOP budget
(planned on the depths each run draws: every run ends within one step below the budget), then
scored on the named evaluation sets at serving depths 1..64 and every difficulty, and under the
KL exit rule (`scoring.py`); `analysis.py` turns the scores into intervals over seeds and verdicts
by rules fixed in advance. Runs train side by side in worker processes (one per free core on a
CPU), each scored as soon as it finishes. Runs live in DIR/runs/SCHEDULE-seedN/ and their scores
beside them, so invoking the experiment again reuses everything already done.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar

from fixedfirst.errors import UserError
from fixedfirst.schedules import describe
from fixedfirst.serve.adaptive import KLExit
from fixedfirst.studies.kit.claims import Claim
from fixedfirst.studies.kit.depth_arms import BAND_CLAIMS
from fixedfirst.studies.kit.presets import PAPER_SCHEDULES, Arm, Evaluated, PresetStudy
from fixedfirst.studies.kit.results import cost, scoring
from fixedfirst.studies.kit.runs import PlannedRun
from fixedfirst.studies.kit.settings import StudySettings
from fixedfirst.studies.kit.workers import Job
from fixedfirst.tasks.chains.sets import SETS, STANDARD


@dataclass
class ExperimentConfig(StudySettings):
    """The `[experiment]` section of a chains preset."""

    SEQUENCES: ClassVar[tuple[str, ...]] = ("sequences", "set_sequences")

    flops: float = 3e12
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4])
    schedules: list[str] = field(default_factory=lambda: list(PAPER_SCHEDULES))
    """Which of the paper's schedules to train: fixed-4, uniform-1-16, fixed-first-4-0.8,
    fixed-first-2-0.67, progressive."""
    depths: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64])
    sequences: int = 256
    """Sequences of the standard evaluation set and of the selection set (each has one label of
    every difficulty 0..eval_ops)."""
    sets: list[str] = field(default_factory=lambda: list(SETS))
    """Named evaluation sets scored besides `standard` (tasks/chains/sets.py): neg-0.1,
    neg-0.9, plus-only, neg-only, alternating, plus-plus-neg-neg, longest."""
    set_sequences: int = 128
    """Sequences of every named set other than the standard one."""
    kl_threshold: float = 1e-3
    """The KL exit rule's threshold (Huginn's default)."""
    kl_max_depth: int = 64
    """The KL exit rule's deepest iteration."""
    primary: list[Annotated[Claim, BAND_CLAIMS]] = field(default_factory=list)
    """The primary comparisons, `[[experiment.primary]]` tables named before the runs, each
    decided by its own 95% interval over seeds; every other difference the report computes is
    exploratory, its verdict corrected over all of them by Holm's method. The default preset
    names three (docs/studies/chains.md)."""

    def check(self) -> None:
        s = self.SECTION
        unknown = [n for n in self.schedules if n not in PAPER_SCHEDULES]
        if not self.schedules or unknown:
            raise UserError(
                f"{s}.schedules: choose from {', '.join(PAPER_SCHEDULES)}, got {self.schedules}"
            )
        unknown_sets = [n for n in self.sets if n not in SETS]
        if STANDARD not in self.sets or unknown_sets or len(set(self.sets)) != len(self.sets):
            raise UserError(
                f"{s}.sets: distinct names from {', '.join(SETS)}, {STANDARD!r} among them, "
                f"got {self.sets}"
            )
        if not 0 <= self.kl_threshold <= 10:
            raise UserError(f"{s}.kl_threshold: must be in [0, 10], got {self.kl_threshold}")
        if not 1 <= self.kl_max_depth <= 1024:
            raise UserError(f"{s}.kl_max_depth: must be in 1..1024, got {self.kl_max_depth}")

    @property
    def rule(self) -> KLExit:
        return KLExit(self.kl_threshold, self.kl_max_depth)


def score_job(run: Path, experiment: ExperimentConfig) -> dict[str, Any]:
    """A finished run's scores (computed once, cached beside the run): a worker's job."""
    from fixedfirst.studies.chains.scoring import score_run

    e = experiment
    return score_run(run, e.depths, e.sequences, e.rule, e.sets, e.set_sequences)


class ChainsStudy(PresetStudy[ExperimentConfig]):
    """Every schedule of the paper on the chains task, each run scored once it has finished."""

    name = "chains"
    evaluated = "scoring"
    collecting = "scoring"
    PACKAGE = "fixedfirst.studies.chains"
    PRESETS = ("default", "smoke")
    SETTINGS = ExperimentConfig
    DATA_KIND = "chains"

    def arms(self) -> dict[str, Arm]:
        return {name: Arm(PAPER_SCHEDULES[name]) for name in self.experiment.schedules}

    def evaluations(self, planned: PlannedRun, run: Path) -> list[Job]:
        def bands(scores: dict[str, Any]) -> Any:
            return scores["sets"][STANDARD]["bands"]

        e, depths = self.experiment, (1, 4, 16, 64)
        return [scoring(planned.name, run, score_job, e, bands=bands, depths=depths)]

    def results(self, evaluated: list[Evaluated]) -> dict[str, Any]:
        """Every run's cost and scores, in one JSON-ready document."""
        from fixedfirst.data.registry import kind_options
        from fixedfirst.studies.chains.analysis import analyse

        e = self.experiment
        runs = {}
        for run in evaluated:
            runs[run.outcome.name] = {
                "schedule": run.arm,
                "label": describe(run.config.schedule),
                "description": describe(run.config.schedule),
                "seed": run.seed,
                "path": str(run.outcome.path),
                **cost(run.outcome.summary),
                "scores": run.values[0],
            }
        options = kind_options(self.run_config(e.schedules[0], e.seeds[0]))
        return {
            "format": "fixedfirst-chains-results",
            "version": 2,
            "preset": self.preset,
            "flop_budget": e.flops,
            "task": asdict(options),
            "experiment": e.to_dict(),
            "chance": 1 / options.values,
            "runs": runs,
            "analysis": analyse(runs, e.depths, options.max_ops, e.primary),
        }

    def write(self, results: dict[str, Any], out: Path) -> list[Path]:
        from fixedfirst.studies.chains.figure import FIGURES, plot_figures
        from fixedfirst.studies.chains.report import write_report

        plot_figures(results, out)
        write_report(results, out)
        return [*(out / name for name in FIGURES), out / "report.json", out / "report.md"]


load_preset = ChainsStudy.load
"""A shipped preset or a path to a preset TOML, plus `--set` overrides."""
