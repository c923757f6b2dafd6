"""A run's plan: its token or FLOP budget turned into optimizer steps, tokens and modeled FLOPs.

Compute-matched runs are planned on the realised cost of the depths they will draw (a pure
function of seed and step), so that runs with different schedules end within one step below the
same FLOPs (docs/design.md §3); an auto switch is planned at its dearest allowed step (§14).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

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
class RunPlan:
    """A run's plan, computed once from its configuration (`plan_run`): how many optimizer steps
    it takes, which depth each step draws, and what it spends under the compute model."""

    schedule: Schedule
    """The run's depth schedule; an auto switch is undecided until the run decides (`decided`)."""
    flop_model: FlopModel
    total_steps: int
    tokens_per_step: int
    grad_depth: int | None
    flops: float
    """Realised: the modeled FLOPs of the depths the run draws (the trainer's final count); an
    auto switch's at its dearest allowed step (the most it may spend)."""
    expected_flops: float
    """The schedule's expected cost over `total_steps` steps (an auto switch at its floor)."""
    flop_budget: float | None
    """train.flops, when the run is compute-matched; `flops` is then within one step below it."""
    switch_window: tuple[int, int] | None = None
    """An auto switch's earliest and latest step; None for every other schedule."""

    @property
    def tokens(self) -> int:
        return self.total_steps * self.tokens_per_step

    @property
    def compute_matched(self) -> bool:
        return self.flop_budget is not None

    @property
    def costed_schedule(self) -> Schedule:
        """The schedule the budget is planned on: an undecided auto switch at its floor."""
        if self.switch_window is not None and self.schedule.switch_step(self.total_steps) is None:
            return self.schedule.with_switch_step(self.switch_window[0])
        return self.schedule

    @property
    def switch_step(self) -> int | None:
        """fixed-first's first finishing step (None for other kinds and an undecided switch)."""
        return self.schedule.switch_step(self.total_steps)

    def depth(self, step: int) -> int:
        return self.schedule.depth(step, self.total_steps)

    def step_flops(self, depth: int) -> float:
        """Modeled training FLOPs of one optimizer step at `depth`."""
        return self.tokens_per_step * self.flop_model.train(depth, self.grad_depth)

    def decided(self, switch_step: int) -> RunPlan:
        """This plan with its auto switch decided at `switch_step` (the budget stays as planned)."""
        return replace(self, schedule=self.schedule.with_switch_step(switch_step))

    def modeled_savings(self) -> float:
        """1 - cost(schedule) / cost(uniform 1..16) over the same steps: an auto switch at the
        step it switched at once decided (`decided`), before that at its floor (the least it
        saves)."""

        def cost(schedule: Schedule) -> float:
            return schedule_flops(
                schedule, self.flop_model, self.total_steps, self.tokens_per_step, self.grad_depth
            )

        reference = Schedule(UNIFORM_REFERENCE, self.schedule.seed)
        return 1.0 - cost(self.costed_schedule) / cost(reference)


def plan_run(config: RunConfig, total_steps: int | None = None) -> RunPlan:
    """Resolve `train.tokens` (or, when set, `train.flops`) into a number of optimizer steps and
    cost it; `total_steps` instead takes a number of steps as given (a run already planned)."""
    t = config.train
    schedule = Schedule(config.schedule, t.seed)
    fm = flop_model(config.model, t.seq_len)
    auto = config.schedule.auto_switch
    steps = total_steps if total_steps is not None else _planned_steps(config, schedule, fm)
    window = switch_bounds(config.switch, steps) if auto else None
    if window is not None:  # the most it may spend, and the expectation at the floor
        check_window(config.switch, steps, t.log_every)
        realised = dearest_switch_flops(config, schedule, fm, steps)
        costed = schedule.with_switch_step(window[0])
    else:
        realised = realised_flops(schedule, fm, steps, t.tokens_per_step, t.grad_depth)
        costed = schedule
    return RunPlan(
        schedule=schedule,
        flop_model=fm,
        total_steps=steps,
        tokens_per_step=t.tokens_per_step,
        grad_depth=t.grad_depth,
        flops=realised,
        expected_flops=schedule_flops(costed, fm, steps, t.tokens_per_step, t.grad_depth),
        flop_budget=t.flops,
        switch_window=window,
    )


def _planned_steps(config: RunConfig, schedule: Schedule, fm: FlopModel) -> int:
    """The steps a run's token budget, or its FLOP budget, pays for."""
    t = config.train
    if t.flops is not None and config.schedule.auto_switch:
        # Planned to fit the budget wherever the rule fires (docs/design.md §14).
        return _plan(
            lambda n: dearest_switch_flops(config, schedule, fm, n),
            schedule_flops(
                schedule.with_switch_step(0), fm, MAX_STEPS, t.tokens_per_step, t.grad_depth
            ),
            t.flops,
            t.tokens_per_step,
        )
    if t.flops is not None:
        return plan_steps(schedule, fm, t.flops, t.tokens_per_step, t.grad_depth)
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
    return steps
