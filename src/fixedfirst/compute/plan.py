"""A run's plan: its token or FLOP budget turned into optimizer steps, tokens and modeled FLOPs.

Compute-matched runs are planned on the realised cost of the depths they will draw (a pure
function of seed and step), so that runs with different schedules end within one step below the
same FLOPs (docs/design.md §3); an auto switch is planned at its dearest allowed step (§14).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fixedfirst.compute.flops import FlopModel, flop_model, realised_flops, schedule_flops
from fixedfirst.config import RunConfig, ScheduleConfig
from fixedfirst.config.limits import MAX_STEPS
from fixedfirst.errors import UserError
from fixedfirst.schedules import Schedule
from fixedfirst.switching.policy import check_window, switch_bounds

UNIFORM_REFERENCE = ScheduleConfig(kind="uniform", k_min=1, k_max=16)
"""The schedule savings are measured against: uniform K in 1..16 (Geiping et al. 2025)."""


def plan_steps(
    schedule: Schedule,
    flops: FlopModel,
    flop_budget: float,
    tokens_per_step: int,
    grad_depth: int | None = None,
) -> int:
    """A number of optimizer steps N whose realised modeled cost fits `flop_budget` while
    N + 1 steps would not: compute-matched runs end within one step of the budget, below it.

    This is how compute-matched runs are planned: a cheaper schedule gets more tokens. The
    realised cost (the depths the run will draw, a pure function of seed and step) is used, not
    the expectation, which would leave "compute-matched" runs several percent apart
    (docs/design.md §3). The realised cost is not quite monotone in N, so a run two or more
    steps longer may occasionally fit as well; N still ends below the budget by less than its
    dearest step.
    """

    def cost(steps: int) -> float:
        return realised_flops(schedule, flops, steps, tokens_per_step, grad_depth)

    # The exact expectation is cheap; the realised cost draws every step's depth.
    expected_max = schedule_flops(schedule, flops, MAX_STEPS, tokens_per_step, grad_depth)
    return _plan(cost, expected_max, flop_budget, tokens_per_step)


def _plan(
    cost: Callable[[int], float], expected_max: float, flop_budget: float, tokens_per_step: int
) -> int:
    """An N with cost(N) <= flop_budget < cost(N + 1), by doubling then bisection (see
    plan_steps); `expected_max` is the expected cost of MAX_STEPS steps, which refuses an
    unbounded budget before drawing a million depths."""
    if cost(1) > flop_budget:
        raise UserError(
            f"train.flops = {flop_budget:.3g} is below the cost of a single step "
            f"({cost(1):.3g} FLOPs); raise the FLOP budget or lower train.batch_size"
        )
    lo, hi = 1, 2
    while flop_budget > 0.9 * expected_max or cost(hi) <= flop_budget:
        if hi > MAX_STEPS or flop_budget > 0.9 * expected_max:
            raise UserError(
                f"train.flops = {flop_budget:.3g} pays for more than {MAX_STEPS:,} optimizer "
                f"steps of {tokens_per_step:,} tokens, the most a run may plan; lower the FLOP "
                "budget or raise train.batch_size"
            )
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # cost(lo) <= budget < cost(hi)
        mid = (lo + hi) // 2
        if cost(mid) <= flop_budget:
            lo = mid
        else:
            hi = mid
    return lo


def dearest_switch_flops(
    config: RunConfig, schedule: Schedule, flops: FlopModel, total_steps: int
) -> float:
    """The realised cost of an auto-switch run of `total_steps` steps at its dearest allowed
    switch step: what it may spend at most, wherever its rule fires (docs/design.md §14).

    Moving the switch from the floor to step s turns the finishing draws of the steps in between
    into K0 steps; that is cheaper unless those draws were shallower than K0 (a U{1..16} draw of
    1 against K0 = 2), so the dearest switch is usually, not always, the floor."""
    t = config.train
    floor, ceiling = switch_bounds(config.switch, total_steps)
    at_floor = schedule.with_switch_step(floor)
    cost = realised_flops(at_floor, flops, total_steps, t.tokens_per_step, t.grad_depth)
    k0 = flops.train(config.schedule.k0, t.grad_depth)
    extra = dearest = 0.0
    for step in range(floor, ceiling):
        extra += k0 - flops.train(at_floor.depth(step, total_steps), t.grad_depth)
        dearest = max(dearest, extra)
    return cost + t.tokens_per_step * dearest


@dataclass(frozen=True)
class Budget:
    """What a run will spend: steps, tokens and modeled training FLOPs."""

    total_steps: int
    tokens: int
    flops: float
    """Realised: the modeled FLOPs of the depths the run draws (the trainer's final count)."""
    expected_flops: float
    """The schedule's expected cost over `total_steps` steps."""
    flop_budget: float | None
    """train.flops, when the run is compute-matched; `flops` is then within one step below it."""

    @property
    def compute_matched(self) -> bool:
        return self.flop_budget is not None


def plan_budget(config: RunConfig) -> Budget:
    """Resolve `train.tokens` (or, when set, `train.flops`) into a number of optimizer steps."""
    t = config.train
    schedule = Schedule(config.schedule, t.seed)
    fm = flop_model(config.model, t.seq_len)
    auto = config.schedule.auto_switch
    if t.flops is not None and auto:
        # Planned to fit the budget wherever the rule fires (docs/design.md §14).
        steps = _plan(
            lambda n: dearest_switch_flops(config, schedule, fm, n),
            schedule_flops(
                schedule.with_switch_step(0), fm, MAX_STEPS, t.tokens_per_step, t.grad_depth
            ),
            t.flops,
            t.tokens_per_step,
        )
    elif t.flops is not None:
        steps = plan_steps(schedule, fm, t.flops, t.tokens_per_step, t.grad_depth)
    else:
        steps = t.tokens // t.tokens_per_step
        if steps > MAX_STEPS:
            raise UserError(
                f"train.tokens = {t.tokens:,} makes {steps:,} optimizer steps of "
                f"{t.tokens_per_step:,} tokens, more than the {MAX_STEPS:,} a run may plan; "
                "lower train.tokens or raise train.batch_size"
            )
        if steps < 1:
            raise UserError(
                f"train.tokens = {t.tokens} is less than one step of batch_size * seq_len = "
                f"{t.tokens_per_step} tokens; raise train.tokens"
            )
    if auto:  # the most it may spend, and the expectation at the floor
        check_window(config.switch, steps, t.log_every)
        realised = dearest_switch_flops(config, schedule, fm, steps)
        schedule = schedule.with_switch_step(switch_bounds(config.switch, steps)[0])
    else:
        realised = realised_flops(schedule, fm, steps, t.tokens_per_step, t.grad_depth)
    return Budget(
        total_steps=steps,
        tokens=steps * t.tokens_per_step,
        flops=realised,
        expected_flops=schedule_flops(schedule, fm, steps, t.tokens_per_step, t.grad_depth),
        flop_budget=t.flops,
    )


def modeled_savings(
    config: RunConfig, total_steps: int | None = None, switch_step: int | None = None
) -> float:
    """1 - cost(schedule) / cost(uniform 1..16), both over the same token budget. An auto switch
    is costed at `switch_step`, the step its run switched at (by default its floor, where it
    saves the least)."""
    t = config.train
    steps = total_steps if total_steps is not None else plan_budget(config).total_steps
    fm = flop_model(config.model, t.seq_len)
    schedule = Schedule(config.schedule, t.seed)
    if config.schedule.auto_switch:
        schedule = schedule.with_switch_step(
            switch_step if switch_step is not None else switch_bounds(config.switch, steps)[0]
        )
    ours = schedule_flops(schedule, fm, steps, t.tokens_per_step, t.grad_depth)
    ref = schedule_flops(
        Schedule(UNIFORM_REFERENCE, t.seed), fm, steps, t.tokens_per_step, t.grad_depth
    )
    return 1.0 - ours / ref


def planned_schedule(config: RunConfig, total_steps: int) -> Schedule:
    """The schedule a run of `total_steps` steps is planned on: an auto switch at its floor (the
    most it may spend, as `plan_budget` plans it)."""
    schedule = Schedule(config.schedule, config.train.seed)
    if config.schedule.auto_switch:
        schedule = schedule.with_switch_step(switch_bounds(config.switch, total_steps)[0])
    return schedule
