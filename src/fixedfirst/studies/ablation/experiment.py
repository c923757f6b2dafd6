"""When does fixed-depth training stop generalising across depth? An architecture ablation.

The paper's fixed-depth model collapses at serving depths far from its training depth; ours (on
bios recall, on the fortunes text) does not. This experiment trains a task's preset model at one
fixed depth K with one architecture switch flipped at a time, each run to the task preset's FLOP
budget, and scores the task's own metric (`DataKind.evaluate`: recalled bits for bios, accuracy on
the harder half of the training range for chains) at depth 1, K, 2K, 4K and 16K:

    state_init   normal <-> zeros     the initial recurrent state (a random draw or zeros)
    injection    concat <-> add       how the prelude output enters every iteration
    norm         pre <-> sandwich     Huginn's norm after each residual sum, or none
    coda_norm    true <-> false       the norm between the recurrence and the coda

Runs live in DIR/runs/VARIANT-seedN/, scores beside them, so a second invocation reuses them;
with --jobs the runs train side by side, each scored as soon as it has finished.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fixedfirst.config import RunConfig, ScheduleConfig
from fixedfirst.errors import UserError
from fixedfirst.evaluation.task import cached_task_evaluation
from fixedfirst.studies.bios.experiment import BiosStudy
from fixedfirst.studies.chains.experiment import ChainsStudy
from fixedfirst.studies.kit.presets import Arm, Evaluated, PresetStudy
from fixedfirst.studies.kit.results import print_scores
from fixedfirst.studies.kit.runs import PlannedRun
from fixedfirst.studies.kit.settings import check_seeds
from fixedfirst.studies.kit.workers import Job, once_finished

TASKS: dict[str, type[PresetStudy[Any]]] = {"bios": BiosStudy, "chains": ChainsStudy}
"""Task -> the study whose preset gives the model, data, training settings and budget."""

SWITCHES: dict[str, tuple[Any, Any]] = {
    "state_init": ("normal", "zeros"),
    "injection": ("concat", "add"),
    "norm": ("pre", "sandwich"),
    "coda_norm": (True, False),
}
MULTIPLES = (1, 2, 4, 16)
"""Serving depths scored, as multiples of the training depth (and depth 1 besides)."""


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"'


@dataclass
class AblationConfig:
    """What the ablation trains: the task's preset at fixed depth `depth`, with these seeds, to
    the task preset's FLOP budget."""

    task: str
    depth: int
    seeds: list[int]
    flops: float

    @property
    def depths(self) -> list[int]:
        return sorted({1, *(m * self.depth for m in MULTIPLES)})


class AblationStudy(PresetStudy[AblationConfig]):
    """The task's preset model at one fixed depth, one architecture switch flipped at a time."""

    name = "ablation"
    evaluated = "task scores"
    collecting = "scoring"

    def arms(self) -> dict[str, Arm]:
        """The preset's own model, then each switch flipped."""
        model = RunConfig.from_dict(self.base).model
        fixed = ScheduleConfig(kind="fixed", depth=self.experiment.depth)
        arms = {"preset": Arm(fixed)}
        for switch, (a, b) in SWITCHES.items():
            flipped = b if getattr(model, switch) == a else a
            arms[f"{switch}={str(flipped).lower()}"] = Arm(fixed, model={switch: flipped})
        return arms

    def evaluations(self, planned: PlannedRun, run: Path) -> list[Job]:
        def say(scored: tuple[str, dict[str, float]], seconds: float) -> None:
            print_scores(planned.name, "", scored[1], seconds, percent=False)

        depths = self.experiment.depths
        return [once_finished(f"score {planned.name}", run, task_scores, depths, say=say)]

    def results(self, evaluated: list[Evaluated]) -> dict[str, Any]:
        """Every variant's task score at each depth."""
        scored, names = {}, set()
        for run in evaluated:
            name, scores = run.values[0]
            names.add(name)
            scored[run.outcome.name] = {
                "variant": run.arm,
                "seed": run.seed,
                "steps": run.outcome.summary["steps"],
                "flops": run.outcome.summary["flops"],
                "scores": scores,
            }
        e = self.experiment
        return {
            "format": "fixedfirst-ablation-results",
            "task": e.task,
            "preset": self.preset,
            "training_depth": e.depth,
            "depths": e.depths,
            "flop_budget": e.flops,
            "seeds": e.seeds,
            "variants": {
                name: [f"model.{key}={_toml(value)}" for key, value in arm.model.items()]
                for name, arm in self.arms().items()
            },
            "score_name": " / ".join(sorted(names)),
            "runs": scored,
        }

    def write(self, results: dict[str, Any], out: Path) -> list[Path]:
        from fixedfirst.studies.ablation.report import write_report

        write_report(results, out)
        return [out / "report.json", out / "report.md"]


def load_ablation(
    task: str, preset: str, overrides: list[str] | None, depth: int, seeds: list[int]
) -> AblationStudy:
    if task not in TASKS:
        raise UserError(f"--task {task!r}: choose one of {', '.join(TASKS)}")
    if not 1 <= depth <= 64:
        raise UserError(f"--depth must be in 1..64 (16x of it is scored), got {depth}")
    check_seeds(seeds, "--seeds")
    loaded = TASKS[task].load(preset, overrides)
    settings = AblationConfig(task, depth, seeds, loaded.experiment.flops)
    ablation = AblationStudy(preset, loaded.base, settings)
    ablation.runs()  # every variant is a valid run
    return ablation


def task_scores(run: Path, depths: list[int]) -> tuple[str, dict[str, float]]:
    """(what is scored, the task metric of the run's final checkpoint at each depth): the
    library's task evaluation, cached beside the run like any other; a worker's job."""
    result, _ = cached_task_evaluation(run, depths)
    return result["score_name"], result["scores"]
