"""Finishing a model trained at one depth: how many tokens of a uniform-depth finishing stage, at
which learning rate, buy depth flexibility (issue 58; docs/guides/any-loop.md, "Make your
fixed-depth looped model depth-flexible").

Base runs train at a fixed depth K with every seed of the preset (our chains model at K = 4 in
the `dense` preset, transformers' looped mixture-of-experts at 2 passes in `moe`). Each finished
base branches (`fixedfirst branch --finish`, train/finishing_stage.py) into finishing stages of
every fraction of its tokens in `fractions`, each at every finishing rate in `rates` (constant
at the base's final rate, or a re-warmup to `rewarm_peak` of the peak and a decay), each step at
a depth uniform in 1..k_max. A finish trains more tokens than its base, so each fraction in
`controls` also continues the base at its own depth K, at its final rate held constant, for as
many tokens (`continued_stage`): the control that tells the finishing depths' gain from more
training's. Each fraction in `lowrank` finishes the base with low-rank adapters alone, at the
constant rate (`lowrank_stage`): a run of its own from the base's final weights, written as a
checkpoint directory (DIR/weights/NAME/), the adapters from the preset's `[train.lowrank]`
(which the base runs themselves do not train with) or its defaults. The base (0% finishing) and
every finish are scored by depth: on chains by difficulty and band (studies/kit/depth_scoring.py)
and read by the chains study's rules (studies/kit/depth_arms.py), on text (`[data] kind =
"tokens"`) by held-out NLL per token on rows drawn by the seed (studies/kit/nll_arms.py), by the
same rules; each against the base, with the preset's primary comparisons.

The finishes are evaluation jobs of their base run (they wait for it, side by side with other
runs under --jobs); each lives in DIR/runs/finish-RATE-FRACTION-seedN/ (a control in
DIR/runs/continued-FRACTION-seedN/, a low-rank one in DIR/runs/finish-lowrank-FRACTION-seedN/),
a run directory of its own, and a second invocation reuses or resumes it like any run of a study.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from fixedfirst.compute.run_cost import run_plan
from fixedfirst.config import LowRankConfig, RunConfig, ScheduleConfig
from fixedfirst.errors import UserError
from fixedfirst.studies.kit.claims import Claim
from fixedfirst.studies.kit.depth_arms import BAND_CLAIMS, DepthArmsSettings, arms_results
from fixedfirst.studies.kit.depth_scoring import score_by_depth
from fixedfirst.studies.kit.nll_arms import NLL_CLAIMS, nll_results, score_held_out_nll
from fixedfirst.studies.kit.presets import Arm, Evaluated, PresetStudy
from fixedfirst.studies.kit.results import cost, print_scores, scored_bands, scoring
from fixedfirst.studies.kit.runs import PlannedRun, finished_summary, run_directory, run_one
from fixedfirst.studies.kit.workers import Job, once_finished, run_progress
from fixedfirst.train.finishing_stage import continued_stage, finishing_stage, lowrank_stage

Rate = Literal["constant", "rewarm"]
CONTINUED = "continued"
LOWRANK = "lowrank"
Stage = Literal["constant", "rewarm", "continued", "lowrank"]
"""What a base is trained on with: a finish at one of the rates, its control (`continued`), or a
finish of low-rank adapters at the constant rate (`lowrank`)."""
TEXT = "tokens"
"""The data kind scored by held-out NLL (studies/kit/nll_arms.py); `chains` is scored by band."""
DATA_KINDS = ("chains", TEXT)
BASE = "base"
"""The arm of the base runs themselves: 0% finishing, the reference of every comparison."""


def finish_arm(stage: str, fraction: float) -> str:
    return f"{stage}-{fraction:g}"


def stage_run(stage: Stage, fraction: float, seed: int) -> str:
    """The run directory's name of a base's finish or control."""
    prefix = "" if stage == CONTINUED else "finish-"
    return f"{prefix}{finish_arm(stage, fraction)}-seed{seed}"


@dataclass
class FinishingSettings(DepthArmsSettings):
    """The `[experiment]` section of a finishing preset."""

    flops: float = 1e12
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
    controls: list[float] = field(default_factory=list)
    """Controls as fractions of the base's training tokens: the base trained on at its own
    depth, at its final rate held constant, for as many tokens as the finish of that fraction
    (arm `continued-FRACTION`); none: no control arm."""
    lowrank: list[float] = field(default_factory=list)
    """Low-rank finishes as fractions of the base's training tokens: adapters alone (the
    preset's `[train.lowrank]`, or its defaults) trained on the base's final weights at depths
    uniform in 1..k_max at its final rate held constant (arm `lowrank-FRACTION`); a transformers
    looped architecture only. None: no low-rank arm."""
    depths: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 6, 8, 12, 16])
    compare_depths: list[int] = field(default_factory=lambda: [1, 4, 8, 16])
    """Depths at which every finish is compared with its base (the exploratory family)."""
    sequences: int = 256
    primary: list[Annotated[Claim, BAND_CLAIMS]] = field(default_factory=list)
    """The primary comparisons on chains, named before the runs; `a` and `b` are arms: `base`
    or RATE-FRACTION, e.g. `rewarm-0.1`, `continued-0.1`, `lowrank-0.1`."""
    nll_primary: list[Annotated[Claim, NLL_CLAIMS]] = field(default_factory=list)
    """The primary comparisons on text (`[data] kind = "tokens"`), named before the runs: held-out
    NLL per token, arms as in `primary` (lower is better)."""

    def check(self) -> None:
        s = self.SECTION
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
        if any(not 0 < f <= 10 for f in self.controls) or len(set(self.controls)) != len(
            self.controls
        ):
            raise UserError(
                f"{s}.controls: the base continued at its own depth for these fractions of its "
                f"tokens, each once and in (0, 10], got {self.controls}"
            )
        if any(not 0 < f <= 10 for f in self.lowrank) or len(set(self.lowrank)) != len(
            self.lowrank
        ):
            raise UserError(
                f"{s}.lowrank: low-rank finishes for these fractions of the base's tokens, each "
                f"once and in (0, 10], got {self.lowrank}"
            )
        if len(set(self.rates)) != len(self.rates):
            raise UserError(f"{s}.rates: each rate once, got {self.rates}")
        names = [p.name for p in self.nll_primary]
        if len(set(names)) != len(names):
            raise UserError(f"{s}.nll_primary: every claim needs its own name, got {names}")
        for i, p in enumerate(self.nll_primary):
            try:
                self.check_claim(p, NLL_CLAIMS)
            except UserError as e:
                raise UserError(f"{s}.nll_primary[{i}]: {e}") from None
        if not 0 < self.rewarm_peak <= 1 or not 0 <= self.rewarm_warmup < 1:
            raise UserError(
                f"{s}.rewarm_peak must be in (0, 1] and {s}.rewarm_warmup in [0, 1), got "
                f"{self.rewarm_peak} and {self.rewarm_warmup}"
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            **super().to_dict(),
            "nll_primary": [NLL_CLAIMS.write(p) for p in self.nll_primary],
        }

    def arms(self) -> tuple[list[str], str]:
        """The base, then every finish, by rate then fraction, then every control."""
        names = [BASE, *(finish_arm(r, f) for r in self.rates for f in sorted(self.fractions))]
        names += [finish_arm(CONTINUED, f) for f in sorted(self.controls)]
        names += [finish_arm(LOWRANK, f) for f in sorted(self.lowrank)]
        s = self.SECTION
        return names, f"{s}.rates, {s}.fractions, {s}.controls and {s}.lowrank"

    def stages(self) -> list[tuple[Stage, float]]:
        """(stage, fraction) of every finish and control of a base, in the arms' order."""
        stages: list[tuple[Stage, float]] = []
        for rate in self.rates:
            for fraction in sorted(self.fractions):
                stages.append((rate, fraction))
        stages += [("continued", f) for f in sorted(self.controls)]
        return stages + [("lowrank", f) for f in sorted(self.lowrank)]

    def finish(
        self,
        config: RunConfig,
        steps: int,
        stage: Stage,
        fraction: float,
        adapters: LowRankConfig | None = None,
    ) -> RunConfig:
        """The finishing stage (or the control) of a base run of `config` trained `steps`
        steps; a low-rank one with `adapters` (default: `[train.lowrank]`'s defaults), its
        [model] still the base's."""
        if stage == "continued":
            return continued_stage(config, steps, fraction)
        if stage == "lowrank":
            return lowrank_stage(config, steps, fraction, self.k_max, adapters or LowRankConfig())
        return finishing_stage(
            config, steps, fraction, self.k_max, stage, self.rewarm_peak, self.rewarm_warmup
        )


def score_run(run: Path, settings: FinishingSettings) -> dict[str, Any]:
    """A finished run's scores by depth: chains accuracy by difficulty and band, or on text the
    held-out NLL per token on `sequences` rows drawn by its seed."""
    from fixedfirst.runs.directory import RunDir

    if RunDir(run).saved_config().data.kind == TEXT:
        return score_held_out_nll(run, settings.depths, settings.sequences)
    return score_by_depth(run, settings.depths, settings.sequences)


def score_job(run: Path, settings: FinishingSettings) -> dict[str, Any]:
    """The base run's own scores (the 0% arm)."""
    return {"scores": score_run(run, settings)}


def finish_job(
    base: Path,
    root: Path,
    name: str,
    stage: Stage,
    fraction: float,
    settings: FinishingSettings,
    adapters: LowRankConfig | None = None,
) -> dict[str, Any]:
    """Branch the finished base into its finishing stage or control DIR/runs/NAME (unless
    done), or start its low-rank finish from its final weights; train it to the end (or reuse
    it) and score it."""
    from fixedfirst.runs.directory import RunDir
    from fixedfirst.train.branch import branch_run

    source = RunDir(base)
    summary = finished_summary(source)
    if summary is None:
        raise UserError(f"{base} is not trained to the end; its finishes wait for it")
    config = settings.finish(source.saved_config(), summary["steps"], stage, fraction, adapters)
    out = run_directory(root, name)
    if stage == LOWRANK:
        config = from_final_weights(config, base, root / WEIGHTS / name, settings.depth)
    elif not out.holds_run():
        branch_run(source, out, config, None)
    outcome = run_one(PlannedRun(name, config), root, quiet=True)
    return {
        "summary": outcome.summary,
        "scores": score_run(out.path, settings),
    }


WEIGHTS = "weights"
"""DIR/weights/NAME/: the final weights of NAME's base, as the checkpoint directory NAME's
low-rank finish starts from."""


def from_final_weights(config: RunConfig, base: Path, weights: Path, depth: int) -> RunConfig:
    """`config` (a low-rank finish of the run `base`) starting from `base`'s final weights,
    written once into the checkpoint directory `weights` (the class's own `save_pretrained`,
    serving at the base's `depth`) and named by their checksum."""
    from fixedfirst.config.architectures import quiet_transformers
    from fixedfirst.data.prepared import write_trained_on
    from fixedfirst.export.writer import write_directory
    from fixedfirst.model.transformers_loop import TransformersLoop
    from fixedfirst.runs.identity import with_checkpoint_identity
    from fixedfirst.runs.opening import load_any_run

    if not (weights / "config.json").is_file():
        model = load_any_run(base).model
        assert isinstance(model, TransformersLoop)  # checked when the preset was loaded
        model.handle.set_depth(depth)
        network: Any = model.network  # a transformers model: its class's own save_pretrained

        def fill(directory: Path) -> None:
            with quiet_transformers():
                network.save_pretrained(str(directory), safe_serialization=True)
            write_trained_on(directory, config.data)  # what a run from it may train on

        write_directory(weights, fill)
    raw = config.to_dict()
    raw["model"] = {"checkpoint": str(weights.resolve())}
    return with_checkpoint_identity(RunConfig.from_dict(raw))


class FinishingStudy(PresetStudy[FinishingSettings]):
    """Base runs at a fixed depth, each finished at every (rate, fraction), continued at its
    depth for every control fraction, and scored."""

    name = "finishing"
    evaluated = "finishing stages"
    collecting = "finishing"
    PACKAGE = "fixedfirst.studies.finishing"
    PRESETS = ("dense", "moe", "smoke", "standin-chains", "standin-text")
    SETTINGS = FinishingSettings

    def arms(self) -> dict[str, Arm]:
        return {BASE: Arm(ScheduleConfig(kind="fixed", depth=self.experiment.depth))}

    def run_config(self, arm: str, seed: int) -> RunConfig:
        """The base runs train every weight: a preset's `[train.lowrank]` is its low-rank
        finishes' (`adapters`)."""
        config = super().run_config(arm, seed)
        return replace(config, train=replace(config.train, lowrank=None))

    def adapters(self) -> LowRankConfig:
        """The low-rank finishes' adapters: the preset's `[train.lowrank]`, or its defaults."""
        return RunConfig.from_dict(self.base).train.lowrank or LowRankConfig()

    def runs(self) -> list[PlannedRun]:
        given = "lowrank" in self.base.get("train", {})
        if given and not self.experiment.lowrank:
            raise UserError(
                "[train.lowrank] sets the adapters of the low-rank finishes, and this preset has "
                "none: set experiment.lowrank (e.g. [0.1]) or remove [train.lowrank]"
            )
        kind = self.base.get("model", {}).get("kind")
        if self.experiment.lowrank and kind != "transformers":
            raise UserError(
                "experiment.lowrank: low-rank finishes adapt a transformers looped architecture "
                '([model] kind = "transformers"), and this preset trains fixedfirst\'s own '
                "looped transformer; set experiment.lowrank = []"
            )
        kind = self.base.get("data", {}).get("kind")
        if kind not in DATA_KINDS:
            raise UserError(
                f"a finishing preset trains on [data] kind = 'chains' (scored by band) or "
                f"'tokens' (scored by held-out NLL), not {kind!r}"
            )
        e = self.experiment
        if kind == TEXT and e.primary:
            raise UserError(
                "[[experiment.primary]] compares accuracy by band on chains, and this preset "
                "trains on 'tokens': name its primaries in [[experiment.nll_primary]]"
            )
        if kind != TEXT and e.nll_primary:
            raise UserError(
                "[[experiment.nll_primary]] compares held-out NLL on text, and this preset "
                f"trains on {kind!r}: name its primaries in [[experiment.primary]]"
            )
        runs = super().runs()
        for planned in runs:  # every finish can be configured: refused now, not part-way
            for _, stage, fraction in self.finishes(planned):
                self.finish_plan(planned, stage, fraction)
        return runs

    def finishes(self, planned: PlannedRun) -> list[tuple[str, Stage, float]]:
        """(run name, stage, fraction) of every finish and control of the base run `planned`."""
        seed = planned.config.train.seed
        return [(stage_run(s, f, seed), s, f) for s, f in self.experiment.stages()]

    def finish_plan(self, planned: PlannedRun, stage: Stage, fraction: float) -> Any:
        """The plan of a finish or control of the base run `planned` (steps, tokens, FLOPs)."""
        steps = run_plan(planned.config).total_steps
        finish = self.experiment.finish(planned.config, steps, stage, fraction, self.adapters())
        return run_plan(finish)

    def scoring(
        self, name: str, run: Path, call: Callable[..., Any], *args: Any, label: str | None = None
    ) -> Job:
        """The job scoring run `name` once `run` has finished, `call(run, *args)`; as it finishes
        it says the hard band's accuracy by depth on chains, the held-out NLL on text."""
        if self.base.get("data", {}).get("kind") != TEXT:
            return scoring(name, run, call, *args, bands=scored_bands, label=label)

        def say(result: Any, seconds: float) -> None:
            nll = result["scores"]["nll"]
            print_scores(name, "held-out NLL ", nll, seconds, percent=False)

        return once_finished(label or f"score {name}", run, call, *args, say=say)

    def evaluations(self, planned: PlannedRun, run: Path) -> list[Job]:
        root, e = run.parent.parent, self.experiment
        jobs = [self.scoring(planned.name, run, score_job, e)]
        for name, stage, fraction in self.finishes(planned):
            args = (root, name, stage, fraction, e, self.adapters())
            job = self.scoring(name, run, finish_job, *args, label=name)
            budget = self.finish_plan(planned, stage, fraction).flops
            job.progress = run_progress(run_directory(root, name).path, budget)
            jobs.append(job)
        return jobs

    def results(self, evaluated: list[Evaluated]) -> dict[str, Any]:
        """Every base and finish: cost, finishing tokens and scores, and their analysis."""
        runs: dict[str, dict[str, Any]] = {}
        for run in evaluated:
            tokens = run.outcome.summary["tokens"]
            runs[run.outcome.name] = {
                "arm": BASE,
                "seed": run.seed,
                "rate": None,
                "fraction": 0.0,
                **cost(run.outcome.summary),
                "finishing_tokens": 0,
                "scores": run.values[0]["scores"],
            }
            planned = PlannedRun(run.outcome.name, run.config)
            for (name, stage, fraction), done in zip(
                self.finishes(planned), run.values[1:], strict=True
            ):
                runs[name] = {
                    "arm": finish_arm(stage, fraction),
                    "seed": run.seed,
                    "rate": stage if stage in ("constant", "rewarm") else "constant",
                    "fraction": fraction,
                    **cost(done["summary"]),
                    "finishing_tokens": finishing_tokens(stage, done["summary"], tokens),
                    "scores": done["scores"],
                }
        first = self.run_config(BASE, self.experiment.seeds[0])
        e = self.experiment
        if first.data.kind == TEXT:
            return nll_results(
                "fixedfirst-finishing-nll-results", self.preset, BASE, e, first, runs
            )
        return arms_results("fixedfirst-finishing-results", self.preset, BASE, e, first, runs)

    def write(self, results: dict[str, Any], out: Path) -> list[Path]:
        if results["format"] == "fixedfirst-finishing-nll-results":
            from fixedfirst.studies.finishing.nll_report import NLL_REPORT

            return NLL_REPORT.write(results, out)
        from fixedfirst.studies.finishing.report import REPORT

        return REPORT.write(results, out)


def finishing_tokens(stage: Stage, summary: dict[str, Any], base_tokens: int) -> int:
    """The tokens a finish trained beyond its base: a low-rank finish is a run of its own, a
    branch goes on from the base's tokens."""
    return summary["tokens"] if stage == LOWRANK else summary["tokens"] - base_tokens


load_preset = FinishingStudy.load
"""A shipped preset or a path to a preset TOML, plus `--set` overrides."""
