"""A finishing stage for a run trained at one depth: the configuration of its branch
(`fixedfirst branch --finish`).

A looped model trained at a fixed depth K serves well at K only (docs/studies/chains.md). A
finishing stage goes on from its last checkpoint for a fraction of the tokens it was trained on,
each step at a depth drawn uniformly from k_min..k_max, at a learning rate of its own
(`train.finishing`, train/optim.py). Written as a run, the branch is a fixed-first run whose
switch is the branch step: the steps before it are the original run's (fixed at K, the same
learning rate), so the branch resumes exactly where the run ended, and a resume, an evaluation or
a study reads it as any other run (docs/guides/any-loop.md, "make your fixed-depth looped model
depth-flexible").
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from fixedfirst.config import FinishingLR, RunConfig, ScheduleConfig
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
    total = trained_steps + extra
    finish = ScheduleConfig(
        kind="fixed-first",
        depth=schedule.depth,
        k0=schedule.depth,
        switch=trained_steps / total,
        finish="uniform",
        k_min=1,
        k_max=k_max,
    )
    train = replace(
        config.train,
        tokens=total * config.train.tokens_per_step,
        flops=None,
        finishing=FinishingLR(trained_steps, lr, peak, warmup),
    )
    return replace(config, schedule=finish, train=train)
