"""Finishing a model trained at one depth: how many tokens of a uniform-depth finishing stage, at
which learning rate, buy depth flexibility (issue 58; docs/guides/any-loop.md, "Make your
fixed-depth looped model depth-flexible").

Base runs train at a fixed depth K with every seed of the preset (our chains model at K = 4 in
the `dense` preset, transformers' looped mixture-of-experts at 2 passes in `moe`). Each finished
base branches (`fixedfirst branch --finish`, train/finishing_stage.py) into finishing stages of
every fraction of its tokens in `fractions`, each at every finishing rate in `rates` (constant
at the base's final rate, or a re-warmup to `rewarm_peak` of the peak and a decay), each step at
a depth uniform in 1..k_max. The base (0% finishing) and every finish are scored by depth and
difficulty on the chains task (studies/depth_scoring.py) and read by the chains study's rules,
against the base, with the preset's primary comparisons (studies/depth_arms.py).

The finishes are evaluation jobs of their base run (they wait for it, side by side with other
runs under --jobs); each lives in DIR/runs/finish-RATE-FRACTION-seedN/, a run directory of its
own, and a second invocation reuses or resumes it like any run of a study.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Literal

from fixedfirst.compute.run_cost import run_plan
from fixedfirst.config import RunConfig, ScheduleConfig
from fixedfirst.errors import UserError
from fixedfirst.studies.chains.analysis import PrimaryComparison
from fixedfirst.studies.presets import Arm, Evaluated, PresetStudy
from fixedfirst.studies.side_by_side import Job, once_finished, run_progress
from fixedfirst.studies.training import PlannedRun, run_directory
from fixedfirst.train.finishing_stage import finishing_stage

Rate = Literal["constant", "rewarm"]
BASE = "base"
"""The arm of the base runs themselves: 0% finishing, the reference of every comparison."""


def finish_arm(rate: str, fraction: float) -> str:
    return f"{rate}-{fraction:g}"


@dataclass
class FinishingSettings:
    """The `[experiment]` section of a finishing preset."""

    SECTION: ClassVar[str] = "experiment"

    flops: float = 1e12
    """Modeled training-FLOP budget of every base run."""
    seeds: list[int] = field(default_factory=lambda: [300, 301, 302])
    """Training seeds of the base runs (their finishes draw their depths from the same seed)."""
    depth: int = 4
    """The fixed depth K the base runs train at."""
    k_max: int = 8
    """The finishing stage's deepest depth (depths uniform in 1..k_max)."""
    fractions: list[float] = field(default_factory=lambda: [0.05, 0.1, 0.2])
    """Finishing stages as fractions of the base's training tokens (0%: the base itself)."""
    rates: list[Rate] = field(default_factory=lambda: ["constant", "rewarm"])
    """Finishing learning rates: `constant` at the base's final rate, `rewarm` (below)."""
    rewarm_peak: float = 0.3
    """`rewarm`: the rate warmed up to, as a fraction of the base's peak rate."""
    rewarm_warmup: float = 0.1
    """`rewarm`: the fraction of the finishing steps spent warming up."""
    depths: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 6, 8, 12, 16])
    """Serving depths at which accuracy is measured."""
    compare_depths: list[int] = field(default_factory=lambda: [1, 4, 8, 16])
    """Depths at which every finish is compared with its base (the exploratory family)."""
    sequences: int = 256
    """Evaluation sequences (one label of every difficulty 0..eval_ops each)."""
    primary: list[PrimaryComparison] = field(default_factory=list)
    """The primary comparisons, named before the runs; `a` and `b` are arms: `base` or
    RATE-FRACTION, e.g. `rewarm-0.1`."""

    def __post_init__(self) -> None:
        s = self.SECTION
        if self.flops <= 0:
            raise UserError(f"{s}.flops: the FLOP budget must be > 0, got {self.flops}")
        if len(self.seeds) < 2 or len(set(self.seeds)) != len(self.seeds) or min(self.seeds) < 0:
            raise UserError(
                f"{s}.seeds: at least two distinct seeds >= 0 (the intervals are over seeds), "
                f"got {self.seeds}"
            )
        if not 1 <= self.depth <= self.k_max <= 64:
            raise UserError(
                f"{s}.k_max: the finishing depths 1..k_max must reach the base's depth "
                f"{self.depth} and stay <= 64, got k_max = {self.k_max}"
            )
        if not self.fractions or any(not 0 < f <= 10 for f in self.fractions):
            raise UserError(
                f"{s}.fractions: finishing stages as fractions of the base's tokens, each in "
                f"(0, 10] (the base itself is the 0% arm), got {self.fractions}"
            )
        if len(set(self.fractions)) != len(self.fractions) or not self.rates:
            raise UserError(f"{s}.fractions and {s}.rates: distinct values, at least one each")
        if len(set(self.rates)) != len(self.rates):
            raise UserError(f"{s}.rates: each rate once, got {self.rates}")
        if not 0 < self.rewarm_peak <= 1 or not 0 <= self.rewarm_warmup < 1:
            raise UserError(
                f"{s}.rewarm_peak must be in (0, 1] and {s}.rewarm_warmup in [0, 1), got "
                f"{self.rewarm_peak} and {self.rewarm_warmup}"
            )
        if not self.depths or min(self.depths) < 1 or max(self.depths) > 64:
            raise UserError(f"{s}.depths: depths must be in 1..64, got {self.depths}")
        missing = [d for d in self.compare_depths if d not in self.depths]
        if not self.compare_depths or missing:
            raise UserError(
                f"{s}.compare_depths: {missing or 'none'} not among experiment.depths "
                f"{self.depths}; compare at depths that are measured"
            )
        if not 2 <= self.sequences <= 100_000:
            raise UserError(f"{s}.sequences: must be in 2..100000, got {self.sequences}")
        names = [p.name for p in self.primary]
        if len(set(names)) != len(names):
            raise UserError(f"{s}.primary: every comparison needs its own name, got {names}")
        for i, p in enumerate(self.primary):
            try:
                p.check(self.arms, self.depths, "experiment.rates and experiment.fractions")
            except UserError as e:
                raise UserError(f"{s}.primary[{i}]: {e}") from None

    @property
    def arms(self) -> list[str]:
        """The base, then every finish, by rate then fraction."""
        return [BASE, *(finish_arm(r, f) for r in self.rates for f in sorted(self.fractions))]

    def finish(self, config: RunConfig, steps: int, rate: Rate, fraction: float) -> RunConfig:
        """The finishing stage of a base run of `config` trained `steps` steps."""
        return finishing_stage(
            config, steps, fraction, self.k_max, rate, self.rewarm_peak, self.rewarm_warmup
        )


def score_job(run: Path, settings: FinishingSettings) -> dict[str, Any]:
    """The base run's own scores (the 0% arm)."""
    from fixedfirst.studies.depth_scoring import score_by_depth

    return {"scores": score_by_depth(run, settings.depths, settings.sequences)}


def finish_job(
    base: Path, root: Path, name: str, rate: Rate, fraction: float, settings: FinishingSettings
) -> dict[str, Any]:
    """Branch the finished base into its finishing stage DIR/runs/NAME (unless done), train it
    to the end (or reuse it) and score it."""
    from fixedfirst.runs.directory import RunDir
    from fixedfirst.studies.depth_scoring import score_by_depth
    from fixedfirst.studies.training import finished_summary, run_one
    from fixedfirst.train.branch import branch_run

    source = RunDir(base)
    summary = finished_summary(source)
    if summary is None:
        raise UserError(f"{base} is not trained to the end; its finishes wait for it")
    config = settings.finish(source.saved_config(), summary["steps"], rate, fraction)
    out = run_directory(root, name)
    if not out.holds_run():
        branch_run(source, out, config, None)
    outcome = run_one(PlannedRun(name, config), root, quiet=True)
    return {
        "summary": outcome.summary,
        "scores": score_by_depth(out.path, settings.depths, settings.sequences),
    }


def print_scores(name: str, scored: dict[str, Any], seconds: float) -> None:
    bands = scored["scores"]["bands"]
    hard = [b for b in bands.values() if b["in_range"]][-1]
    shown = ", ".join(f"K={d} {100 * a:.0f}%" for d, a in hard["by_depth"].items())
    print(f"  {name}: difficulty {hard['low']}..{hard['high']} {shown} ({seconds:.0f} s)")


class FinishingStudy(PresetStudy[FinishingSettings]):
    """Base runs at a fixed depth, each finished at every (rate, fraction) and scored."""

    name = "finishing"
    evaluated = "finishing stages"
    collecting = "finishing"
    PACKAGE = "fixedfirst.studies.finishing"
    PRESETS = ("dense", "moe", "smoke")
    SETTINGS = FinishingSettings

    def arms(self) -> dict[str, Arm]:
        return {BASE: Arm(ScheduleConfig(kind="fixed", depth=self.experiment.depth))}

    def runs(self) -> list[PlannedRun]:
        runs = super().runs()
        if runs[0].config.data.kind != "chains":
            raise UserError(
                "a finishing preset trains on [data] kind = 'chains', "
                f"not {runs[0].config.data.kind!r}"
            )
        e = self.experiment
        for planned in runs:  # every finish can be configured: refused now, not part-way
            steps = run_plan(planned.config).total_steps
            for rate in e.rates:
                for fraction in e.fractions:
                    run_plan(e.finish(planned.config, steps, rate, fraction))
        return runs

    def finishes(self, planned: PlannedRun) -> list[tuple[str, Rate, float]]:
        """(run name, rate, fraction) of every finish of the base run `planned`."""
        seed = planned.config.train.seed
        e = self.experiment
        return [
            (f"finish-{finish_arm(r, f)}-seed{seed}", r, f)
            for r in e.rates
            for f in sorted(e.fractions)
        ]

    def evaluations(self, planned: PlannedRun, run: Path) -> list[Job]:
        root = run.parent.parent
        jobs = [
            once_finished(
                f"score {planned.name}",
                run,
                score_job,
                self.experiment,
                say=partial(print_scores, planned.name),
            )
        ]
        for name, rate, fraction in self.finishes(planned):
            job = once_finished(name, run, finish_job, root, name, rate, fraction, self.experiment)
            job.say = partial(print_scores, name)
            steps = run_plan(planned.config).total_steps
            budget = run_plan(self.experiment.finish(planned.config, steps, rate, fraction))
            job.progress = run_progress(run_directory(root, name).path, budget.flops)
            jobs.append(job)
        return jobs

    def results(self, evaluated: list[Evaluated]) -> dict[str, Any]:
        """Every base and finish: cost, finishing tokens and scores, and their analysis."""
        from fixedfirst.studies.depth_arms import arms_results

        e = self.experiment
        runs: dict[str, dict[str, Any]] = {}
        for run in evaluated:
            s = run.outcome.summary
            runs[run.outcome.name] = {
                "arm": BASE,
                "seed": run.seed,
                "rate": None,
                "fraction": 0.0,
                "steps": s["steps"],
                "tokens": s["tokens"],
                "finishing_tokens": 0,
                "flops": s["flops"],
                "wall_s": s["wall"],
                "scores": run.values[0]["scores"],
            }
            planned = PlannedRun(run.outcome.name, run.config)
            for (name, rate, fraction), done in zip(
                self.finishes(planned), run.values[1:], strict=True
            ):
                f = done["summary"]
                runs[name] = {
                    "arm": finish_arm(rate, fraction),
                    "seed": run.seed,
                    "rate": rate,
                    "fraction": fraction,
                    "steps": f["steps"],
                    "tokens": f["tokens"],
                    "finishing_tokens": f["tokens"] - s["tokens"],
                    "flops": f["flops"],
                    "wall_s": f["wall"],
                    "scores": done["scores"],
                }
        first = self.run_config(BASE, e.seeds[0])
        return arms_results("fixedfirst-finishing-results", self.preset, BASE, e, first, runs)

    def write(self, results: dict[str, Any], out: Path) -> list[Path]:
        from fixedfirst.studies.finishing.report import FIGURE, plot_figure, write_report

        plot_figure(results, out / FIGURE)
        write_report(results, out)
        return [out / FIGURE, out / "report.json", out / "report.md"]


load_preset = FinishingStudy.load
"""A shipped preset or a path to a preset TOML, plus `--set` overrides."""
