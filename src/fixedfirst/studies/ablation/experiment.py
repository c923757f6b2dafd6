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

import importlib
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from fixedfirst.config import RunConfig, apply_overrides
from fixedfirst.errors import UserError
from fixedfirst.evaluation.task import cached_task_evaluation
from fixedfirst.studies.side_by_side import Experiment, Job, conduct, run_finished
from fixedfirst.studies.training import PlannedRun, RunOutcome, run_directory

TASKS = {
    "bios": "fixedfirst.studies.bios.experiment",
    "chains": "fixedfirst.studies.chains.experiment",
}
"""Task -> the experiment whose preset gives the model, data, training settings and budget."""

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
class Ablation:
    task: str
    preset_name: str
    base: dict[str, Any]
    flops: float
    depth: int
    seeds: list[int]

    @property
    def depths(self) -> list[int]:
        return sorted({1, *(m * self.depth for m in MULTIPLES)})

    def variants(self) -> dict[str, list[str]]:
        """Variant name -> model overrides: the preset's own model, then each switch flipped."""
        model = RunConfig.from_dict(self.base).model
        out: dict[str, list[str]] = {"preset": []}
        for switch, (a, b) in SWITCHES.items():
            flipped = b if getattr(model, switch) == a else a
            out[f"{switch}={str(flipped).lower()}"] = [f"model.{switch}={_toml(flipped)}"]
        return out

    def run_config(self, overrides: list[str], seed: int) -> RunConfig:
        schedule = ["schedule.kind=fixed", f"schedule.depth={self.depth}"]
        budget = [f"train.flops={self.flops!r}", f"train.seed={seed}"]
        return RunConfig.from_dict(apply_overrides(self.base, [*schedule, *budget, *overrides]))

    def planned_runs(self) -> list[PlannedRun]:
        return [
            PlannedRun(f"{name}-seed{seed}", self.run_config(overrides, seed))
            for name, overrides in self.variants().items()
            for seed in self.seeds
        ]


def load_ablation(
    task: str, preset: str, overrides: list[str] | None, depth: int, seeds: list[int]
) -> Ablation:
    if task not in TASKS:
        raise UserError(f"--task {task!r}: choose one of {', '.join(TASKS)}")
    if not 1 <= depth <= 64:
        raise UserError(f"--depth must be in 1..64 (16x of it is scored), got {depth}")
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise UserError(f"--seeds: distinct seeds >= 0, at least one, got {seeds}")
    loaded = importlib.import_module(TASKS[task]).load_preset(preset, overrides)
    ablation = Ablation(task, preset, loaded.base, loaded.experiment.flops, depth, seeds)
    for overrides_of_variant in ablation.variants().values():
        ablation.run_config(overrides_of_variant, seeds[0])  # every variant is a valid run
    return ablation


def task_scores(run: Path, depths: list[int]) -> tuple[str, dict[str, float]]:
    """(what is scored, the task metric of the run's final checkpoint at each depth): the
    library's task evaluation, cached beside the run like any other; a worker's job."""
    result, _ = cached_task_evaluation(run, depths)
    return result["score_name"], result["scores"]


def print_scores(name: str, scores: dict[str, float]) -> None:
    shown = ", ".join(f"K={d} {v:.3g}" for d, v in scores.items())
    print(f"  scored {name}: {shown}", flush=True)


def collect_results(
    ablation: Ablation, outcomes: list[RunOutcome], quiet: bool = False
) -> dict[str, Any]:
    """Every variant's task score at each depth (read back from its cache, or measured now)."""
    scored, names = {}, set()
    for outcome in outcomes:
        name, scores = task_scores(outcome.path, ablation.depths)
        names.add(name)
        variant, seed = outcome.name.rsplit("-seed", 1)
        scored[outcome.name] = {
            "variant": variant,
            "seed": int(seed),
            "steps": outcome.summary["steps"],
            "flops": outcome.summary["flops"],
            "scores": scores,
        }
        if not quiet:
            print_scores(outcome.name, scores)
    return {
        "format": "fixedfirst-ablation-results",
        "task": ablation.task,
        "preset": ablation.preset_name,
        "training_depth": ablation.depth,
        "depths": ablation.depths,
        "flop_budget": ablation.flops,
        "seeds": ablation.seeds,
        "variants": ablation.variants(),
        "score_name": " / ".join(sorted(names)),
        "runs": scored,
    }


def run_ablation(
    ablation: Ablation, out: Path, quiet: bool = False, jobs: int | None = None
) -> dict[str, Any]:
    """Train (or reuse) every variant, score it, write results.json and report.md.

    jobs: worker processes (None: one per free core on a CPU, up to the runs left to train;
    see `fixedfirst.studies.side_by_side`). With more than one, each run is scored as soon as it
    has finished."""
    experiment = Experiment(
        name="ablation",
        runs=ablation.planned_runs(),
        evaluations=partial(_scoring_jobs, ablation.depths, out),
        evaluated="task scores",
        show=_show_scores,
        collect=partial(collect_results, ablation),
        collecting="scoring",
        write=_write_report,
    )
    return conduct(experiment, out, quiet, jobs)


def _scoring_jobs(depths: list[int], out: Path, planned: PlannedRun) -> list[Job]:
    """A run's task scores, ready once the run has finished."""
    path = run_directory(out, planned.name).path
    ready = partial(run_finished, path)
    return [Job(f"score {planned.name}", task_scores, (path, depths), ready=ready)]


def _show_scores(job: Job, result: tuple[str, dict[str, float]], seconds: float) -> None:
    print_scores(job.args[0].name, result[1])


def _write_report(results: dict[str, Any], out: Path) -> None:
    from fixedfirst.studies.ablation.report import write_report

    write_report(results, out)
