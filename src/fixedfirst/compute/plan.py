"""A run's plan: which depth and phase each optimizer step trains at, and what the run costs.

Planning reads downward: the schedule gives every step's depth (schedules.py), the depths a run
draws make its depth histogram, and the compute model costs the histogram (compute/flops.py). A
token budget is a number of steps; a FLOP budget is the number of steps whose drawn depths fit it,
so runs with different schedules end within one step below the same FLOPs (docs/design.md §3); an
auto switch is planned at its dearest allowed step (§14). The same `RunPlan` drives our trainer
(`plan_costed_run`, on our model or a transformers one) and anyone's loop on any looped model
(`plan_schedule`, fixedfirst.scheduling).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from fixedfirst.compute.flops import CostModel, FlopModel, flop_model, train_flops
from fixedfirst.config import RunConfig, ScheduleConfig, SwitchConfig, TrainConfig
from fixedfirst.config.limits import MAX_STEPS
from fixedfirst.config.schema import coerce
from fixedfirst.config.sections import seed_range
from fixedfirst.errors import UserError
from fixedfirst.schedules import DepthHistogram, Schedule
from fixedfirst.switching.policy import check_window, switch_bounds

UNIFORM_REFERENCE = ScheduleConfig(kind="uniform", k_min=1, k_max=16)
"""The schedule savings are measured against: uniform K in 1..16 (Geiping et al. 2025)."""

CostT = TypeVar("CostT", bound=CostModel)


@dataclass(frozen=True)
class PlannedStep:
    """One optimizer step as the plan has it."""

    step: int
    """0-based: the steps done before it."""
    depth: int
    phase: str
    """The schedule's stage the step is in: fixed / finish (fixed-first), ramp / full
    (progressive), or the kind's own name."""


@dataclass(frozen=True)
class RunPlan(Generic[CostT]):
    """A run's plan, computed once (`plan_run`, `plan_schedule`): how many optimizer steps it
    takes, the depth and phase of each (`at`), and what it spends under its compute model."""

    schedule: Schedule
    """The run's depth schedule; an auto switch is undecided until the run decides (`decided`)."""
    flop_model: CostT
    total_steps: int
    tokens_per_step: int
    grad_depth: int | None
    flops: float
    """Realised: the modeled FLOPs of the depths the run draws (the trainer's final count); an
    auto switch's at its dearest allowed step (the most it may spend)."""
    expected_flops: float
    """The schedule's expected cost over `total_steps` steps (an auto switch at its floor)."""
    flop_budget: float | None
    """The FLOP budget, when the run is compute-matched; `flops` is then within one step below."""
    switch: SwitchConfig | None = None
    """The rule of an auto switch (`schedule.switch = "auto"`); None for every other schedule."""

    def __post_init__(self) -> None:
        if self.total_steps < 1 or self.tokens_per_step < 1:  # plan_schedule checks its arguments
            raise UserError(
                f"a plan needs >= 1 step of >= 1 token, got {self.total_steps} steps of "
                f"{self.tokens_per_step} tokens"
            )

    def at(self, step: int) -> PlannedStep:
        """Step `step`'s depth and phase: a pure function of (seed, step), the same on every rank
        and after a resume."""
        stage = self.schedule.stage_at(step, self.total_steps)
        return PlannedStep(step, self.schedule.depth(step, self.total_steps), stage.phase)

    def depth(self, step: int) -> int:
        return self.schedule.depth(step, self.total_steps)

    @property
    def switch_window(self) -> tuple[int, int] | None:
        """An auto switch's earliest and latest step; None for every other schedule."""
        return None if self.switch is None else switch_bounds(self.switch, self.total_steps)

    @property
    def switch_step(self) -> int | None:
        """fixed-first's first finishing step (None for other kinds and an undecided switch)."""
        return self.schedule.switch_step(self.total_steps)

    def decided(self, switch_step: int) -> RunPlan[CostT]:
        """This plan with its auto switch decided at `switch_step` (the budget stays as planned)."""
        return replace(self, schedule=self.schedule.with_switch_step(switch_step))

    @property
    def costed_schedule(self) -> Schedule:
        """The schedule the budget is planned on: an undecided auto switch at its floor."""
        window = self.switch_window
        if window is not None and self.switch_step is None:
            return self.schedule.with_switch_step(window[0])
        return self.schedule

    def histogram(self) -> DepthHistogram:
        """How many of the run's steps train at each depth (of the costed schedule)."""
        return self.costed_schedule.histogram(self.total_steps)

    @property
    def tokens(self) -> int:
        return self.total_steps * self.tokens_per_step

    @property
    def compute_matched(self) -> bool:
        return self.flop_budget is not None

    def step_flops(self, depth: int) -> float:
        """Modeled training FLOPs of one optimizer step at `depth`."""
        return self.tokens_per_step * self.flop_model.train(depth, self.grad_depth)

    def modeled_savings(self) -> float:
        """1 - cost(schedule) / cost(uniform 1..16) over the same steps, both as distributions:
        an auto switch at the step it switched at once decided (`decided`), before that at its
        floor (the least it saves)."""

        def cost(schedule: Schedule) -> float:
            histogram = schedule.expected_histogram(self.total_steps)
            return train_flops(self.flop_model, histogram, self.tokens_per_step, self.grad_depth)

        reference = Schedule(UNIFORM_REFERENCE, self.schedule.seed)
        return 1.0 - cost(self.costed_schedule) / cost(reference)


def plan_run(config: RunConfig, total_steps: int | None = None) -> RunPlan[FlopModel]:
    """The plan of a run of fixedfirst's own model, costed from its shape (`plan_costed_run`);
    a run of any model its [model] names: `compute.run_cost.run_plan`."""
    model = config.own_model("the compute model of a model's shape")
    return plan_costed_run(config, flop_model(model, config.train.seq_len), total_steps)


def plan_costed_run(
    config: RunConfig, cost: CostT, total_steps: int | None = None
) -> RunPlan[CostT]:
    """Resolve `train.tokens` (or, when set, `train.flops`) into a number of optimizer steps and
    cost them under `cost`, the compute model of the run's model; `total_steps` instead takes a
    number of steps as given (a run already planned)."""
    t = config.train
    check_measured_reach(cost, config.schedule)
    schedule = Schedule(config.schedule, t.seed)
    switch = config.switch if config.schedule.auto_switch else None
    if total_steps is None and t.flops is not None:
        total_steps = fit_budget(schedule, cost, t.flops, t.tokens_per_step, t.grad_depth, switch)
    elif total_steps is None:
        total_steps = token_steps(t)
    return costed_plan(
        schedule, cost, total_steps, t.tokens_per_step, t.grad_depth, t.flops, switch, t.log_every
    )


def plan_schedule(
    schedule: ScheduleConfig,
    cost: CostT,
    tokens_per_step: int,
    *,
    steps: int | None = None,
    flops: float | None = None,
    seed: int = 0,
    switch: SwitchConfig | None = None,
    switch_step: int | None = None,
) -> RunPlan[CostT]:
    """The plan of a run of any looped model in any training loop: `steps` optimizer steps, or
    as many as a FLOP budget `flops` pays for (compute-matched), under the compute model `cost`
    (FLOPs per token of one step at a depth: `compute.measured.measure_flops` for a model we
    did not write) with `tokens_per_step` tokens in each step.

    A fixed-first schedule switches at its `switch` fraction, or with `switch = "auto"` where
    the rule of `switch` (default `SwitchConfig()`) decides from the loop's observations
    (`scheduling.depth_scheduler.DepthScheduler`), or at a step the caller gives (`switch_step`)."""
    if (steps is None) == (flops is None):
        raise UserError("give the run's length as steps=N or as a FLOP budget flops=F, one of them")
    checked = checked_arguments(schedule, cost, tokens_per_step, steps, flops, seed, switch_step)
    tokens_per_step, steps, flops, seed, switch_step = checked
    if switch is not None and not isinstance(switch, SwitchConfig):
        raise UserError(f"switch must be a SwitchConfig, got {type(switch).__name__}")
    if switch_step is not None:
        if not schedule.auto_switch:
            raise UserError(
                "switch_step places the switch of a fixed-first schedule whose switch is 'auto'; "
                f"this schedule switches at {schedule.switch!r} (set switch='auto')"
            )
        if switch is not None:
            raise UserError("give switch_step (the caller decides) or switch (its rule decides)")
    elif schedule.auto_switch:
        switch = switch if switch is not None else SwitchConfig()
    elif switch is not None:
        raise UserError("switch configures an auto switch: set the schedule's switch='auto'")
    planned = Schedule(schedule, seed)
    if switch_step is not None:
        planned = planned.with_switch_step(switch_step)
    if flops is not None:
        keys = ("flops", "tokens_per_step")
        steps = fit_budget(planned, cost, flops, tokens_per_step, None, switch, keys)
    assert steps is not None
    if not 1 <= steps <= MAX_STEPS:
        raise UserError(f"steps must be between 1 and {MAX_STEPS:,}, got {steps:,}")
    if switch_step is not None and switch_step >= steps:
        raise UserError(
            f"switch_step = {switch_step:,} is past the plan's last step ({steps - 1:,}): the "
            f"run would never switch; give a step in 0..{steps - 1:,}"
        )
    return costed_plan(planned, cost, steps, tokens_per_step, None, flops, switch, None)


def checked_arguments(
    schedule: ScheduleConfig,
    cost: CostModel,
    tokens_per_step: Any,
    steps: Any,
    flops: Any,
    seed: Any,
    switch_step: Any,
) -> tuple[int, int | None, float | None, int, int | None]:
    """`plan_schedule`'s arguments held to the configuration file's types and ranges (the same
    checks, in the same words, naming the argument): tokens_per_step, steps, flops, seed and
    switch_step as given, or refused in one line."""
    if not isinstance(schedule, ScheduleConfig):
        raise UserError(
            f"schedule must be a ScheduleConfig (the [schedule] section), got "
            f"{type(schedule).__name__}"
        )
    if callable(getattr(cost, "named_parameters", None)):  # a torch module: the model itself
        raise UserError(
            f"cost is the model {type(cost).__name__}, not its compute model: "
            "measure_flops(model, loss, tokens) measures one"
        )
    if not callable(getattr(cost, "train", None)):
        raise UserError(
            f"cost must be a compute model with train(depth, grad_depth) FLOPs per token "
            f"(measure_flops(model, loss, tokens) measures one), got {type(cost).__name__}"
        )
    tokens_per_step = coerce(tokens_per_step, int, "tokens_per_step")
    if tokens_per_step < 1:
        raise UserError(
            f"tokens_per_step must be the tokens of one optimizer step (>= 1), got "
            f"{tokens_per_step}"
        )
    steps = None if steps is None else coerce(steps, int, "steps")
    if flops is not None:
        flops = coerce(flops, float, "flops")
        if flops <= 0:
            raise UserError(f"flops: the FLOP budget must be > 0, got {flops}")
    seed = coerce(seed, int, "seed")
    seed_range(seed, "seed")
    if switch_step is not None:
        switch_step = coerce(switch_step, int, "switch_step")
        if switch_step < 0:
            raise UserError(
                f"switch_step: the first finishing step must be >= 0, got {switch_step}"
            )
    check_measured_reach(cost, schedule)
    return tokens_per_step, steps, flops, seed, switch_step


def check_measured_reach(cost: CostModel, schedule: ScheduleConfig) -> None:
    """Have a measured compute model (compute/measured.py: one with `check_line_at`) check its
    line at the deepest depth the schedule draws: a line through a few shallow depths can hold
    there and be far off deeper (a model whose depth lengthens its sequence is within 1% at
    1..3 and 49% off at 32). A compute model of the caller's own is taken as given."""
    check = getattr(cost, "check_line_at", None)
    if callable(check):
        check(schedule.deepest_depth)


def costed_plan(
    schedule: Schedule,
    cost: CostT,
    steps: int,
    tokens_per_step: int,
    grad_depth: int | None,
    budget: float | None,
    switch: SwitchConfig | None,
    log_every: int | None,
) -> RunPlan[CostT]:
    """The plan of `steps` steps, costed: an auto switch (`switch`, watching losses logged every
    `log_every` steps, or every step in a loop of the caller's own: None) at its dearest allowed
    step, and in expectation at its floor."""
    costed = schedule
    if switch is not None:
        check_window(switch, steps, log_every)
        costed = schedule.with_switch_step(switch_bounds(switch, steps)[0])
        realised = dearest_switch_flops(schedule, switch, cost, steps, tokens_per_step, grad_depth)
    else:
        realised = train_flops(cost, schedule.histogram(steps), tokens_per_step, grad_depth)
    expected = train_flops(cost, costed.expected_histogram(steps), tokens_per_step, grad_depth)
    return RunPlan(
        schedule, cost, steps, tokens_per_step, grad_depth, realised, expected, budget, switch
    )


def dearest_switch_flops(
    schedule: Schedule,
    switch: SwitchConfig,
    cost: CostModel,
    total_steps: int,
    tokens_per_step: int,
    grad_depth: int | None,
) -> float:
    """The realised cost of an auto-switch run of `total_steps` steps at its dearest allowed
    switch step: what it may spend at most, wherever its rule fires (docs/design.md §14).

    Moving the switch from the floor to step s turns the finishing draws of the steps in between
    into K0 steps; that is cheaper unless those draws were shallower than K0 (a U{1..16} draw of
    1 against K0 = 2), so the dearest switch is usually, not always, the floor."""
    floor, ceiling = switch_bounds(switch, total_steps)
    at_floor = schedule.with_switch_step(floor)
    spent = train_flops(cost, at_floor.histogram(total_steps), tokens_per_step, grad_depth)
    k0 = cost.train(schedule.config.k0, grad_depth)
    extra = dearest = 0.0
    for step in range(floor, ceiling):
        extra += k0 - cost.train(at_floor.depth(step, total_steps), grad_depth)
        dearest = max(dearest, extra)
    return spent + tokens_per_step * dearest


def fit_budget(
    schedule: Schedule,
    cost: CostModel,
    flop_budget: float,
    tokens_per_step: int,
    grad_depth: int | None,
    switch: SwitchConfig | None,
    keys: tuple[str, str] = ("train.flops", "train.batch_size"),
) -> int:
    """A number of optimizer steps N whose realised modeled cost fits `flop_budget` while
    N + 1 steps would not: compute-matched runs end within one step of the budget, below it.

    A cheaper schedule gets more tokens. The realised cost (the depths the run will draw, a pure
    function of seed and step) is used, not the expectation, which would leave "compute-matched"
    runs several percent apart (docs/design.md §3); an auto switch's is at its dearest allowed
    step, so it fits wherever its rule fires (§14). The realised cost is not quite monotone in
    N, so a run two or more steps longer may occasionally fit as well; N still ends below the
    budget by less than its dearest step. `keys` name the budget and the batch in errors."""
    if switch is not None:

        def spent(steps: int) -> float:
            return dearest_switch_flops(schedule, switch, cost, steps, tokens_per_step, grad_depth)

        unbounded = schedule.with_switch_step(0)
    else:

        def spent(steps: int) -> float:
            return train_flops(cost, schedule.histogram(steps), tokens_per_step, grad_depth)

        unbounded = schedule
    # The exact expectation is cheap; the realised cost draws every step's depth.
    histogram = unbounded.expected_histogram(MAX_STEPS)
    expected_max = train_flops(cost, histogram, tokens_per_step, grad_depth)
    return _plan(spent, expected_max, flop_budget, tokens_per_step, keys)


def _plan(
    cost: Callable[[int], float],
    expected_max: float,
    flop_budget: float,
    tokens_per_step: int,
    keys: tuple[str, str],
) -> int:
    """An N with cost(N) <= flop_budget < cost(N + 1), by doubling then bisection (see
    fit_budget); `expected_max` is the expected cost of MAX_STEPS steps, which refuses an
    unbounded budget before drawing a million depths."""
    budget_key, batch_key = keys
    if cost(1) > flop_budget:
        raise UserError(
            f"{budget_key} = {flop_budget:.3g} is below the cost of a single step "
            f"({cost(1):.3g} FLOPs); raise the FLOP budget or lower {batch_key}"
        )
    lo, hi = 1, 2
    while flop_budget > 0.9 * expected_max or cost(hi) <= flop_budget:
        if hi > MAX_STEPS or flop_budget > 0.9 * expected_max:
            raise UserError(
                f"{budget_key} = {flop_budget:.3g} pays for more than {MAX_STEPS:,} optimizer "
                f"steps of {tokens_per_step:,} tokens, the most a run may plan; lower the FLOP "
                f"budget or raise {batch_key}"
            )
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # cost(lo) <= budget < cost(hi)
        mid = (lo + hi) // 2
        if cost(mid) <= flop_budget:
            lo = mid
        else:
            hi = mid
    return lo


def token_steps(t: TrainConfig) -> int:
    """The steps a run's token budget pays for."""
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
