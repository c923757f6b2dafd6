"""Finishing a looped checkpoint someone else trained at one depth (`fixedfirst finish`).

A released looped model (transformers' Inkling2Loop, trained at a fixed number of loop passes)
serves well at that depth and poorly elsewhere. A finishing run goes on from its weights for a
budget of tokens at depths drawn uniformly from 1..k_max (or any schedule kind), and, with
`control`, a second run trains the same tokens in the same order at the checkpoint's own depth:
the control says what the tokens alone buy, so that the finishing run's profile is compared
with more than the checkpoint it started from.

DIR/finished and DIR/control are run directories like any other (checkpoints, `--resume`
bit-identical, signals, budgets, `branch`, `eval`); invoking `finish` again with the same
arguments resumes an interrupted run and reuses a finished one. Under torchrun (or `--nproc`)
rank 0 decides, before anything is written, which runs are finished, to resume or to start, and
tells the others, so that every rank trains the same runs. Once both are trained, rank 0 scores
the checkpoint, the control and the finished model on the same held-out blocks
(evaluation/profile.py): DIR/profile.json and DIR/profile.png, the finished run's own evaluation
file beside it (read by `fixedfirst export --format checkpoint` for its model card).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from fixedfirst.compute.run_cost import run_plan
from fixedfirst.config import RunConfig, ScheduleConfig, apply_overrides, merge_tables, read_toml
from fixedfirst.config.checkpoints import checkpoint_model
from fixedfirst.errors import UserError
from fixedfirst.files.paths import absolute, resolve_paths, shown
from fixedfirst.runs.directory import RunDir
from fixedfirst.runs.identity import with_checkpoint_identity
from fixedfirst.runs.served import deepest_training_depth
from fixedfirst.schedules import describe
from fixedfirst.studies.kit.runs import finished_summary

FINISHED, CONTROL = "finished", "control"
PROFILE_FORMAT = "fixedfirst-finish-profile"
PROFILE_VERSION = 1
FINISH_TRAIN = {"lr": 3e-5}
"""[train] keys a finishing run has by default where a run trained from scratch has others: a
fine-tuning rate (a pretrained model's weights are not re-learnt); everything else is [train]'s."""
LONGEST_SEQUENCE = 1024
"""train.seq_len by default: this, or the longest sequence the model takes when shorter."""

State = Literal["new", "resume", "finished"]


@dataclass(frozen=True)
class FinishPlan:
    """The runs of a finish and where they go."""

    out: Path
    checkpoint: str
    native: int
    """The depth the checkpoint was trained at (its loop passes): where the control trains."""
    runs: dict[str, RunConfig]
    """FINISHED, and CONTROL when asked for, in training order."""

    def path(self, name: str) -> Path:
        return self.out / name


def profile_depths(native: int, k_max: int) -> list[int]:
    """The depths a finish is scored at: 1..D and 2D, D the larger of 6, the checkpoint's
    depth and the deepest finishing depth."""
    deepest = max(6, native, k_max)
    return [*range(1, deepest + 1), 2 * deepest]


def plan_finish(
    checkpoint: str,
    data: str,
    out: str,
    budget: dict[str, Any],
    k_max: int | None = None,
    control: bool = False,
    config_file: str | None = None,
    overrides: list[str] | None = None,
) -> FinishPlan:
    """The finishing run (and its control) of `checkpoint` on the prepared `data`: `budget` is
    train.tokens or train.flops; the schedule uniform 1..k_max (default twice the checkpoint's
    depth) unless `config_file` or `overrides` say otherwise; [train] and [eval] from FINISH_TRAIN,
    the file and the overrides, in that order. Refused in one line when it cannot train."""
    model = checkpoint_model({"checkpoint": checkpoint})
    native = int(model["checkpoint_depth"])
    k_max = k_max if k_max is not None else 2 * native
    base: dict[str, Any] = {}
    if config_file is not None:
        base = resolve_paths(read_toml(config_file), Path(config_file).parent)
        given = [section for section in ("model", "data") if section in base]
        if given:
            raise UserError(
                f"{config_file}: [{given[0]}] is finish's to set (the checkpoint, --data); "
                "leave it out of the file"
            )
    raw = merge_tables(defaults(model, k_max), base)
    raw["model"] = {"checkpoint": absolute(checkpoint)}
    raw["data"] = {"kind": "tokens", "path": absolute(data)}
    raw["train"] = {**raw.get("train", {}), **budget}
    raw = apply_overrides(raw, overrides or [])
    if not {"tokens", "flops"} & set(raw["train"]):
        raise UserError(
            "give the finishing run's budget: --tokens N (or --flops F, or train.tokens in "
            "--config)"
        )
    # Identified by its weights' checksum now, as the runs record it (a second invocation
    # compares its runs with what is on disk).
    config = with_checkpoint_identity(RunConfig.from_dict(raw))
    asked = "depths" in base.get("eval", {}) or any(
        o.replace(" ", "").startswith("eval.depths=") for o in overrides or []
    )
    if not asked:  # the profile's depths, past whatever the schedule finally trains at
        depths = profile_depths(native, deepest_training_depth(config))
        config = replace(config, eval=replace(config.eval, depths=depths))
    runs = {FINISHED: config}
    if control:
        runs[CONTROL] = control_config(config, native)
    return FinishPlan(Path(out), absolute(checkpoint), native, runs)


def defaults(model: dict[str, Any], k_max: int) -> dict[str, Any]:
    """A finishing run's configuration before the user's: uniform 1..k_max, FINISH_TRAIN and
    the longest sequence up to LONGEST_SEQUENCE."""
    from fixedfirst.config.run import model_section

    longest = model_section(model).max_seq_len
    return {
        "schedule": {"kind": "uniform", "k_min": 1, "k_max": k_max},
        "train": {**FINISH_TRAIN, "seq_len": min(LONGEST_SEQUENCE, longest)},
    }


def control_config(config: RunConfig, native: int) -> RunConfig:
    """The control of a finishing run: the same tokens (the same number of steps of the same
    batches, whatever budget planned the finishing run) at the checkpoint's depth."""
    schedule = config.schedule
    if schedule.kind == "fixed" and schedule.depth == native:
        raise UserError(
            f"the finishing run trains at the checkpoint's own depth ({native}), so it is its "
            "own control; leave --control out, or finish at other depths"
        )
    tokens = run_plan(config).total_steps * config.train.tokens_per_step
    fixed = ScheduleConfig(kind="fixed", depth=native)
    return replace(config, schedule=fixed, train=replace(config.train, tokens=tokens, flops=None))


def describe_plan(plan: FinishPlan) -> list[str]:
    """What the finish trains, a line per run."""
    lines = []
    for name, config in plan.runs.items():
        budget = run_plan(config)
        lines.append(
            f"{name}: {describe(config.schedule)}, {budget.total_steps} steps, "
            f"{budget.tokens:,} tokens -> {shown(plan.path(name))}"
        )
    return lines


def run_state(run: RunDir, config: RunConfig) -> State:
    """Whether `run` is finished (with `config`), to resume, or to start; a directory holding
    another run is refused."""
    if not run.holds_run():
        return "new"
    run.refuse_other_run(config)
    return "finished" if finished_summary(run) is not None else "resume"


def train_runs(plan: FinishPlan, quiet: bool, stop_after: int | None = None) -> list[str]:
    """Train every run of the plan not yet finished, in order (under torchrun on every rank,
    each run's state decided on rank 0); the names trained now. `stop_after`: pause the run in
    training once it has trained that many steps, and stop there."""
    from fixedfirst.machine.device import resolve_device
    from fixedfirst.train import distributed
    from fixedfirst.train.distributed import World, on_main
    from fixedfirst.train.interrupt import TrainingInterrupted
    from fixedfirst.train.trainer import Trainer

    world = World.from_env()
    device = resolve_device(plan.runs[FINISHED].train.device)
    distributed.start(world, distributed.process_device(world, device))
    states = on_main(
        world, lambda: {n: run_state(RunDir(plan.path(n)), c) for n, c in plan.runs.items()}
    )
    trained = []
    for name, config in plan.runs.items():
        if states[name] == "finished":
            if not quiet and world.is_main:
                print(f"{name}: reusing the finished run in {shown(plan.path(name))}", flush=True)
            continue
        if not quiet and world.is_main:
            print(f"{name}: training {describe(config.schedule)}", flush=True)
        trainer = Trainer(
            config, str(plan.path(name)), resume=states[name] == "resume", quiet=quiet
        )
        try:
            summary = trainer.train(stop_after=stop_after)
        except TrainingInterrupted as e:
            raise TrainingInterrupted(
                "stopped with a checkpoint; run the same `fixedfirst finish` command again: it "
                f"resumes {shown(plan.path(name))} and goes on",
                e.signum,
            ) from None
        del trainer
        trained.append(name)
        if summary["steps"] < summary["total_steps"]:
            raise Paused(plan.path(name), summary["steps"])
    return trained


class Paused(Exception):
    """A run paused by `stop_after`, checkpointed: the finish goes on when invoked again."""

    def __init__(self, run: Path, steps: int) -> None:
        super().__init__(
            f"{shown(run)} paused after {steps} steps (--stop-after); run the same command "
            "again (without --stop-after) to go on"
        )


def profile_finish(plan: FinishPlan, device: Any) -> dict[str, Any]:
    """The checkpoint, the finished model and (when trained) the control scored on the same
    held-out blocks at the finishing run's eval.depths, with the changes paired over blocks:
    profile.json's document. The runs' own evaluation files are reused or written
    (`cached_evaluation`), the finished run's with the checkpoint beside it."""
    from fixedfirst.evaluation.cached import HeldOut, cached_evaluation
    from fixedfirst.evaluation.profile import difference

    depths = plan.runs[FINISHED].eval.depths
    finished, _ = cached_evaluation(plan.path(FINISHED), depths, HeldOut(), device, base=True)
    base = finished["base"]
    if base is None:
        raise UserError(
            f"the checkpoint {shown(plan.checkpoint)} could not be scored beside the finished "
            "run (see the note above)"
        )
    tokens = finished["row_tokens"]
    keys = [str(d) for d in depths]
    models = {"checkpoint": base, FINISHED: finished}
    differences = {f"{FINISHED} - checkpoint": {k: base["difference_by_depth"][k] for k in keys}}
    if CONTROL in plan.runs:
        control, _ = cached_evaluation(plan.path(CONTROL), depths, HeldOut(), device)
        if control["validation_sha256"] != finished["validation_sha256"]:
            raise UserError(
                "the finished and control runs were scored on different blocks (their eval "
                "settings differ); give both the same [eval] and [train] seq_len"
            )
        models = {"checkpoint": base, CONTROL: control, FINISHED: finished}

        def versus(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
            return {k: difference(a["row_nll"][k], b["row_nll"][k], tokens) for k in keys}

        differences[f"{CONTROL} - checkpoint"] = versus(control, base)
        differences[f"{FINISHED} - {CONTROL}"] = versus(finished, control)
    return {
        "format": PROFILE_FORMAT,
        "version": PROFILE_VERSION,
        "checkpoint": finished["checkpoint"],
        "data": finished["data"],
        "depths": depths,
        "blocks": len(tokens),
        "scored_tokens": finished["scored_tokens"],
        "precision": finished["precision"],
        "runs": {
            name: {
                "path": str(plan.path(name)),
                "schedule": describe(config.schedule),
                "step": models[name]["step"],
                "tokens": models[name]["tokens"],
            }
            for name, config in plan.runs.items()
        },
        "models": {
            name: {key: found[key] for key in ("nll_by_depth", "interval_by_depth")}
            for name, found in models.items()
        },
        "differences": differences,
    }


def profile_table(profile: dict[str, Any]) -> list[str]:
    """profile.json as Markdown: NLL [95%] of each model by depth, then the changes."""
    from fixedfirst.evaluation.profile import change_cell, nll_cell

    models, changes = profile["models"], profile["differences"]
    native = profile["checkpoint"]["depth"]
    head = "| depth | " + " | ".join(models) + " | " + " | ".join(changes) + " |"
    lines = [head, "|" + " --- |" * (1 + len(models) + len(changes))]
    for d in profile["depths"]:
        key = str(d)
        cells = [
            nll_cell(m["nll_by_depth"][key], m["interval_by_depth"][key]) for m in models.values()
        ]
        cells += [change_cell(c[key]) for c in changes.values()]
        mark = " (trained)" if d == native else ""
        lines.append(f"| {d}{mark} | " + " | ".join(cells) + " |")
    return lines


def write_profile(profile: dict[str, Any], out: Path) -> list[Path]:
    """DIR/profile.json and DIR/profile.png; the files written."""
    from fixedfirst.evaluation.profile import draw
    from fixedfirst.files.writing import write_json_atomic

    path = out / "profile.json"
    write_json_atomic(path, profile)
    series = list(profile["models"].items())
    title = f"{shown(profile['checkpoint']['path'])}: before and after finishing"
    figure = draw(series, profile["checkpoint"]["depth"], title, out / "profile.png")
    return [path, figure]
