"""Figure 1: depth schedules trained on the same people at matched modeled FLOPs, over seeds.

The paper's synthetic experiment: fixed K=4, uniform K in 1..16, and fixed-first (K0=4, switch
0.8, uniform finish), optionally fixed-first K0=2 at 0.67 and fixed-first with a warmup-stable-
decay learning rate, each trained with every seed of the preset to the same modeled training-FLOP
budget, so a cheap schedule gets more optimizer steps. Each run keeps checkpoints at 15% and 45%
of the budget and at its end (the trainer's FLOP snapshots); each checkpoint's recall is measured
at serving depths 1..64 in one pass of the recurrence per prompt batch; `analysis.py` turns the
seeds' recall into intervals and verdicts.

A preset is a TOML file: the run sections (`[model]`, `[data]`, `[train]`, `[eval]`) shared by
the three runs, plus an `[experiment]` section (budget, snapshots, serving depths, recall sample).
Runs live in `DIR/runs/NAME/` (see `fixedfirst.studies.kit.runs`), and each checkpoint's recall is
cached beside it, so a second invocation with the same DIR reuses everything already done.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Annotated, Any

from fixedfirst.config import RunConfig
from fixedfirst.errors import UserError
from fixedfirst.files.writing import write_json_atomic
from fixedfirst.runs.checkpoint import Checkpoint, CheckpointManager
from fixedfirst.runs.directory import RunDir
from fixedfirst.schedules import describe
from fixedfirst.studies.bios.analysis import BIOS_CLAIMS, check_claim
from fixedfirst.studies.kit.claims import Claim, ClaimTable
from fixedfirst.studies.kit.presets import PAPER_SCHEDULES, Arm, Evaluated, PresetStudy
from fixedfirst.studies.kit.results import cost
from fixedfirst.studies.kit.runs import PlannedRun, finished_summary
from fixedfirst.studies.kit.settings import StudySettings
from fixedfirst.studies.kit.workers import Job

FIGURE1 = ("fixed-4", "uniform-1-16", "fixed-first-4-0.8")
"""The paper's three schedules of Figure 1."""
SCHEDULES: dict[str, Arm] = {
    **{name: Arm(PAPER_SCHEDULES[name]) for name in (*FIGURE1, "fixed-first-2-0.67")},
    "fixed-first-4-0.8-wsd": Arm(
        PAPER_SCHEDULES["fixed-first-4-0.8"], train={"lr_schedule": "wsd", "decay": 0.2}
    ),
}
"""Arm name -> its runs: Figure 1's schedules, fixed-first K0=2 at 0.67, and fixed-first K0=4 at
0.8 under warmup-stable-decay whose decay is the finishing stage (the cosine schedule gives that
stage 13-20% of the peak learning rate; this one starts it at the peak)."""


@dataclass
class ExperimentConfig(StudySettings):
    """The `[experiment]` section of a bios preset."""

    flops: float = 1e15
    snapshots: list[float] = field(default_factory=lambda: [0.15, 0.45])
    """Fractions of the budget evaluated besides the end of the run."""
    depths: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64])
    recall_people: int | None = None
    """People scored by recall (the first n, an unbiased sample); default all."""
    recall_batch: int = 512
    """Prompts per recall forward pass."""
    seeds: list[int] = field(default_factory=lambda: [0])
    """Training seeds (initialisation, biography order and template draws; the people are the
    data seed's); every schedule runs with each."""
    schedules: list[str] = field(default_factory=lambda: list(FIGURE1))
    """Arms to train: fixed-4, uniform-1-16, fixed-first-4-0.8 (Figure 1), fixed-first-2-0.67,
    fixed-first-4-0.8-wsd."""
    primary: list[Annotated[Claim, BIOS_CLAIMS]] = field(default_factory=list)
    """The primary claims, `[[experiment.primary]]` tables named before the runs, each decided
    by its own 95% interval over seeds; every same-seed difference the report computes is
    exploratory, its verdict corrected over all of them by Holm's method. The loop preset names
    three (docs/studies/figure1.md)."""

    def check(self) -> None:
        s = self.SECTION
        if not self.snapshots or any(not 0 < f < 1 for f in self.snapshots):
            raise UserError(
                f"{s}.snapshots: fractions must be in (0, 1), got {self.snapshots} "
                "(the end of each run, 1, is always evaluated)"
            )
        if self.recall_people is not None and self.recall_people < 1:
            raise UserError(f"{s}.recall_people: must be >= 1, got {self.recall_people}")
        if self.recall_batch < 1:
            raise UserError(f"{s}.recall_batch: must be >= 1, got {self.recall_batch}")
        unknown = [n for n in self.schedules if n not in SCHEDULES]
        if not self.schedules or unknown or len(set(self.schedules)) != len(self.schedules):
            raise UserError(
                f"{s}.schedules: distinct names from {', '.join(SCHEDULES)}, got {self.schedules}"
            )

    def check_claim(self, claim: Claim, table: ClaimTable) -> None:
        super().check_claim(claim, table)
        check_claim(claim, self.depths)

    @property
    def fractions(self) -> list[float]:
        return [*sorted(self.snapshots), 1.0]


def snapshot_checkpoint(run: Path, fraction: float) -> Checkpoint:
    manager = CheckpointManager(RunDir(run).checkpoints_path)
    tag = "final" if fraction == 1.0 else f"snapshot-{fraction:g}"
    ckpt = manager.with_tag(tag)
    if ckpt is None:
        raise UserError(f"{run} has no checkpoint tagged {tag!r}; delete the run and start again")
    return ckpt


def recall_of_checkpoint(
    run: Path, config: RunConfig, ckpt: Checkpoint, experiment: ExperimentConfig
) -> dict[str, Any]:
    """The checkpoint's recall report, computed once and cached beside the run, on the device
    the run trained on (a GPU's run scores its thousands of people there, not on the host)."""
    from fixedfirst.data.registry import kind_options
    from fixedfirst.machine.device import resolve_device
    from fixedfirst.model import LoopedTransformer
    from fixedfirst.tasks.bios.recall import evaluate_recall
    from fixedfirst.tasks.bios.world import build_world

    cache = run / f"recall-step-{ckpt.step:07d}.json"
    key = {"depths": sorted(experiment.depths), "people": experiment.recall_people}
    if cache.is_file():
        cached = json.loads(cache.read_text())
        if cached.get("key") == key:
            return cached["report"]
    ckpt.verify()
    model = LoopedTransformer(config.own_model("the bios recall metric"))
    ckpt.load_model(model)
    report = evaluate_recall(
        model.to(resolve_device(config.train.device)).eval(),
        build_world(kind_options(config), config.data.seed),
        experiment.depths,
        people=experiment.recall_people,
        batch_size=experiment.recall_batch,
    ).to_dict()
    write_json_atomic(cache, {"key": key, "report": report})
    return report


@dataclass(frozen=True)
class Recall:
    """A checkpoint's recall report, with where in the run it was taken."""

    fraction: float
    step: int
    flops: float
    report: dict[str, Any]


def print_recall(name: str, recall: Recall, seconds: float) -> None:
    by_depth = recall.report["by_depth"][::3]
    bits = ", ".join(f"K={r['depth']} {r['bits_per_person']:.1f}" for r in by_depth)
    print(
        f"  recall {name} at {recall.fraction:.0%} of the budget (step {recall.step}): {bits} "
        f"bits ({seconds:.0f} s)",
        flush=True,
    )


def recall_job(
    run: Path, config: RunConfig, fraction: float, experiment: ExperimentConfig
) -> Recall:
    """The recall of a run's checkpoint at `fraction` of the budget: a worker's job."""
    ckpt = snapshot_checkpoint(run, fraction)
    report = recall_of_checkpoint(run, config, ckpt, experiment)
    return Recall(fraction, ckpt.step, ckpt.meta["flops"], report)


class BiosStudy(PresetStudy[ExperimentConfig]):
    """Figure 1: the schedules trained on the same people, each checkpoint's recall measured."""

    name = "bios"
    evaluated = "recall"
    collecting = "recall_evaluation"
    PACKAGE = "fixedfirst.studies.bios"
    PRESETS = ("default", "smoke", "loop")
    SETTINGS = ExperimentConfig

    def arms(self) -> dict[str, Arm]:
        snapshots = {"snapshots": list(self.experiment.snapshots)}
        return {
            name: replace(SCHEDULES[name], train={**snapshots, **SCHEDULES[name].train})
            for name in self.experiment.schedules
        }

    def evaluations(self, planned: PlannedRun, run: Path) -> list[Job]:
        """The recall of each of a run's checkpoints, each ready once it is on disk."""
        return [
            Job(
                f"{planned.name} {fraction:g}",
                recall_job,
                (run, planned.config, fraction, self.experiment),
                ready=partial(_checkpoint_ready, run, fraction),
                say=partial(print_recall, planned.name),
            )
            for fraction in self.experiment.fractions
        ]

    def results(self, evaluated: list[Evaluated]) -> dict[str, Any]:
        """Recall of every run at every budget fraction, plus each run's cost."""
        from fixedfirst.data.registry import kind_options
        from fixedfirst.studies.bios.analysis import analyse
        from fixedfirst.tasks.bios.world import build_pools

        records, runs = [], {}
        for run in evaluated:
            for recall in run.values:
                records += [
                    {
                        "schedule": run.arm,
                        "seed": run.seed,
                        "budget_fraction": recall.fraction,
                        "depth": r["depth"],
                        "bits_per_person": r["bits_per_person"],
                        "step": recall.step,
                        "flops": recall.flops,
                    }
                    for r in recall.report["by_depth"]
                ]
            s = run.outcome.summary
            runs[run.outcome.name] = {
                "schedule": run.arm,
                "seed": run.seed,
                "description": describe(run.config.schedule),
                "lr_schedule": run.config.train.lr_schedule,
                "switch": s.get("switch"),
                "path": str(run.outcome.path),
                **cost(s),
                "precision": s.get("precision"),
                "phases": s["phases"],
            }
        e = self.experiment
        base = self.run_config(e.schedules[0], e.seeds[0])
        options = kind_options(base)
        results = {
            "format": "fixedfirst-bios-results",
            "version": 2,
            "preset": self.preset,
            "flop_budget": e.flops,
            "ceiling_bits": build_pools(options, base.data.seed).bits_per_person(),
            "people": options.people,
            "recall_people": e.recall_people or options.people,
            "depths": sorted(e.depths),
            "budget_fractions": e.fractions,
            "primary": [BIOS_CLAIMS.write(p) for p in e.primary],
            "experiment": e.to_dict(),
            "runs": runs,
            "recall": records,
        }
        results["analysis"] = analyse(results)
        return results

    def write(self, results: dict[str, Any], out: Path) -> list[Path]:
        from fixedfirst.studies.bios.figure import plot_figure1
        from fixedfirst.studies.bios.report import write_report

        plot_figure1(results, out / "figure1.png")
        write_report(results, out)
        return [out / "figure1.png", out / "report.json", out / "report.md"]


load_preset = BiosStudy.load
"""A shipped preset or a path to a preset TOML, plus `--set` overrides."""


def _checkpoint_ready(run: Path, fraction: float) -> bool:
    """A snapshot's checkpoint exists (written atomically), or the run has finished: then the
    recall runs, or says in one line which checkpoint is missing (`snapshot_checkpoint`)."""
    if finished_summary(RunDir(run)) is not None:
        return True
    manager = CheckpointManager(RunDir(run).checkpoints_path)
    return fraction < 1.0 and manager.with_tag(f"snapshot-{fraction:g}") is not None
