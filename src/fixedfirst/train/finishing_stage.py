"""A finishing stage for a run trained at one depth: the configuration of its branch
(`fixedfirst branch --finish`).

A looped model trained at a fixed depth K serves well at K and, in our studies, deeper, but
poorly shallower (docs/guides/any-loop.md). A finishing stage goes on from its last checkpoint
for a fraction of the tokens it was trained on, each step at a depth drawn uniformly from
k_min..k_max, at a learning rate of its own (`train.finishing`, train/optim.py). Written as a
run, the branch is a fixed-first run whose switch is the branch step: the steps before it are
the original run's (fixed at K, the same learning rate), so the branch resumes exactly where the
run ended, and a resume, an evaluation or a study reads it as any other run
(docs/guides/any-loop.md, "make your fixed-depth looped model depth-flexible"). Its control, the
run trained on at its own depth for the same tokens at its final rate (`continued_stage`), is
what the finishing study sets a finish against. A low-rank finish (`lowrank_stage`) trains
adapters alone on the run's final weights, as a holder of a checkpoint they cannot fully retrain
would.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from fixedfirst.config import FinishingLR, LowRankConfig, RunConfig, ScheduleConfig, TrainConfig
from fixedfirst.errors import UserError


def finishing_stage(
    config: RunConfig,
    trained_steps: int,
    fraction: float,
    k_max: int,
    lr: Literal["constant", "rewarm"] = "constant",
    peak: float = 0.3,
    warmup: float = 0.1,
) -> RunConfig:
    """The configuration of `config`'s run (fixed depth, trained `trained_steps` steps) going on
    for `fraction` of its tokens more at depths uniform in 1..k_max, at the finishing rate `lr`
    (`rewarm`: up to `peak` of the peak rate over `warmup` of the finishing steps)."""
    total = extended_steps(config, trained_steps, fraction)
    finish = ScheduleConfig(
        kind="fixed-first",
        depth=config.schedule.depth,
        k0=config.schedule.depth,
        switch=trained_steps / total,
        finish="uniform",
        k_min=1,
        k_max=k_max,
    )
    return replace(
        config,
        schedule=finish,
        train=extended_train(config, total, FinishingLR(trained_steps, lr, peak, warmup)),
    )


def continued_stage(config: RunConfig, trained_steps: int, fraction: float) -> RunConfig:
    """The control a finishing stage is set against: `config`'s run trained on at its own fixed
    depth for the same `fraction` of its tokens, at its final rate held constant. A finish that
    beats it buys its gain from the depths it draws, not from training longer."""
    total = extended_steps(config, trained_steps, fraction)
    constant = FinishingLR(trained_steps, "constant")
    return replace(config, train=extended_train(config, total, constant))


def lowrank_stage(
    config: RunConfig, trained_steps: int, fraction: float, k_max: int, adapters: LowRankConfig
) -> RunConfig:
    """A finishing stage of low-rank `adapters` alone, on the final weights of `config`'s run
    (fixed depth, trained `trained_steps` steps): a run of its own, `fraction` of the run's tokens
    long, at depths uniform in 1..k_max, at the run's final rate held constant. Its [model] is
    still `config`'s; the caller points it at the final weights (`[model] checkpoint`), which
    the adapters' frozen base must be."""
    steps = extended_steps(config, trained_steps, fraction) - trained_steps
    train = config.train
    constant = replace(
        train,
        tokens=steps * train.tokens_per_step,
        flops=None,
        lr=train.lr * train.final_lr_fraction,
        warmup=0.0,
        final_lr_fraction=1.0,
        finishing=None,
        lowrank=adapters,
    )
    uniform = ScheduleConfig(kind="uniform", k_min=1, k_max=k_max)
    return replace(config, schedule=uniform, train=constant)


def extended_steps(config: RunConfig, trained_steps: int, fraction: float) -> int:
    """The steps of a run trained `trained_steps` steps at one depth and then `fraction` of its
    tokens more, refused in one line when the run is not at one depth or the share is none."""
    schedule = config.schedule
    if schedule.kind != "fixed":
        raise UserError(
            f"--finish finishes a run trained at one depth (schedule.kind = 'fixed'), but this "
            f"run's schedule is {schedule.kind!r}; branch it with --set schedule.* instead"
        )
    if not 0.0 < fraction <= 10.0:
        raise UserError(
            f"--finish {fraction}: the finishing stage's share of the run's tokens must be in "
            "(0, 10], e.g. 0.1 for 10%"
        )
    extra = round(fraction * trained_steps)
    if extra < 1:
        raise UserError(
            f"--finish {fraction}: {fraction:g} of {trained_steps} steps is less than one step; "
            "finish for a larger fraction"
        )
    return trained_steps + extra


def extended_train(config: RunConfig, total: int, finishing: FinishingLR) -> TrainConfig:
    """The run's training section for `total` steps, the steps from `finishing.start_step` on at
    the finishing rate."""
    tokens = total * config.train.tokens_per_step
    return replace(config.train, tokens=tokens, flops=None, finishing=finishing)
