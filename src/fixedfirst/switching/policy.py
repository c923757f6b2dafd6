"""When an auto switch fires: a floor, a ceiling and one rule over one series (docs/design.md §14).

The policy is pure. It is fed observations (step, value) as the run makes them (logged training
losses for `plateau`, probes of the gain from depth for `depth-gap`) and asked at step boundaries
whether the run switches there. It never sees a value from after the boundary it decides at,
knows nothing of torch or of the trainer, and holds nothing that `state_dict` does not hold
(JSON, in which floats round-trip exactly), which every checkpoint stores: a resumed run goes on
with exactly the observations an uninterrupted run holds at that step, and so switches at the
same step. Tests feed it synthetic curves; `replay` asks where it would have switched on a series
logged by any run.

Steps are boundaries: step s is "s optimizer steps done", and a switch at s means steps s, s+1,
... train at the finishing distribution, as `Schedule.switch_step` counts a fixed switch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from fixedfirst.config import SwitchConfig
from fixedfirst.errors import UserError
from fixedfirst.schedules import fraction_step
from fixedfirst.switching.trend import fit_trend

MIN_POINTS = 5
"""A window with fewer observations never fires the rule: a slope through three or four noisy
points is mostly noise, however small its standard error happens to come out."""


def switch_bounds(config: SwitchConfig, total_steps: int) -> tuple[int, int]:
    """The earliest and the latest switch step of a run of `total_steps` steps."""
    return fraction_step(config.floor, total_steps), fraction_step(config.ceiling, total_steps)


def window_steps(config: SwitchConfig, total_steps: int) -> int:
    return max(1, round(config.window * total_steps))


def check_window(
    config: SwitchConfig, total_steps: int, log_every: int | None, log_key: str = "train.log_every"
) -> None:
    """Refuse a window that can never hold MIN_POINTS observations (the rule could never fire).
    `log_every`: the spacing of logged losses (the trainer's `log_key`, or the Hugging Face
    Trainer's logging_steps); None for a loop of the caller's own, which observes its loss every
    step."""
    spacing = (log_every or 1) if config.rule == "plateau" else config.every
    held = window_steps(config, total_steps) // spacing
    if held < MIN_POINTS:
        most = window_steps(config, total_steps) // MIN_POINTS
        if config.rule == "depth-gap":
            what, knob = "probes", "lower switch.every"
        elif log_every is None:
            what, knob = "losses", "plan more steps"
        else:
            what = "logged losses"
            knob = f"lower {log_key} to at most {most}" if most >= 1 else "plan more steps"
        raise UserError(
            f"switch.window = {config.window:g} of {total_steps} steps holds {held} {what}, "
            f"fewer than the {MIN_POINTS} a trend needs; widen switch.window or {knob}"
        )


@dataclass(frozen=True)
class Check:
    """One look at the trend, at a step boundary."""

    step: int
    points: int
    decrease: float | None
    """The series' fall per unit fraction of the run: minus the fitted slope (None: too few
    points to fit)."""
    stderr: float | None
    bound: float | None
    """decrease + z * stderr: the fall a pessimistic reading of the noise still allows."""
    threshold: float
    fires: bool

    def record(self, rule: str) -> dict[str, Any]:
        """The metrics.jsonl line of this check."""
        return {"kind": "switch_check", "rule": rule, **asdict(self)}


@dataclass(frozen=True)
class Decision:
    step: int
    fraction: float
    reason: Literal["rule", "ceiling"]
    """`rule`: the trend flattened; `ceiling`: the rule had not fired by the ceiling."""
    rule: str

    @property
    def tag(self) -> str:
        """The switch checkpoint's second tag (beside `switch`)."""
        return f"auto-{self.rule}" if self.reason == "rule" else "auto-ceiling"


class SwitchPolicy:
    def __init__(self, config: SwitchConfig, total_steps: int) -> None:
        self.config = config
        self.total_steps = total_steps
        self.floor_step, self.ceiling_step = switch_bounds(config, total_steps)
        self.window_steps = window_steps(config, total_steps)
        self.observations: list[tuple[int, float]] = []
        """The trailing window's (step, value) pairs; older ones are dropped."""
        self.decision: Decision | None = None

    # -- when the trainer stops for the policy --------------------------------------------------

    def wants_probe(self, step: int) -> bool:
        """depth-gap: measure the gain from depth at this boundary (from one window before the
        floor, so that the first check has a full window)."""
        return (
            self.config.rule == "depth-gap"
            and self.decision is None
            and step % self.config.every == 0
            and self.floor_step - self.window_steps <= step < self.ceiling_step
        )

    def checks_at(self, step: int) -> bool:
        """Whether the rule is asked at this boundary: every `every` steps from the floor, and
        at the ceiling."""
        if self.decision is not None:
            return False
        return step == self.ceiling_step or (
            step >= self.floor_step and step % self.config.every == 0
        )

    def due(self, step: int) -> bool:
        return self.wants_probe(step) or self.checks_at(step)

    # -- observing and deciding ------------------------------------------------------------------

    def observe(self, step: int, value: float) -> None:
        """A value of the series at boundary `step` (in increasing order of steps)."""
        if self.decision is not None:
            return
        if self.observations and step <= self.observations[-1][0]:
            raise ValueError(f"observation at step {step} after one at {self.observations[-1][0]}")
        self.observations.append((step, float(value)))
        horizon = step - self.window_steps
        self.observations = [(s, v) for s, v in self.observations if s > horizon]

    def check(self, step: int) -> Check:
        """The trend of the window that ends at `step`, against the threshold."""
        window = [(s, v) for s, v in self.observations if step - self.window_steps < s <= step]
        threshold = self.config.rule_threshold
        trend = fit_trend([s / self.total_steps for s, _ in window], [v for _, v in window])
        if trend is None or trend.points < MIN_POINTS:
            return Check(step, len(window), None, None, None, threshold, False)
        decrease = -trend.slope
        bound = decrease + self.config.z * trend.stderr
        return Check(
            step, trend.points, decrease, trend.stderr, bound, threshold, bound <= threshold
        )

    def decide(self, step: int) -> tuple[Check | None, Decision | None]:
        """At boundary `step`: the check made there (None if none is due) and the decision, once
        the rule fires or the ceiling is reached."""
        if not self.checks_at(step):
            return None, None
        check = self.check(step) if step >= self.floor_step else None
        if check is not None and check.fires:
            reason: Literal["rule", "ceiling"] = "rule"
        elif step == self.ceiling_step:
            reason = "ceiling"
        else:
            return check, None
        self.decision = Decision(step, step / self.total_steps, reason, self.config.rule)
        return check, self.decision

    # -- checkpoints -----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "observations": [[s, v] for s, v in self.observations],
            "decision": None if self.decision is None else asdict(self.decision),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.observations = [(int(s), float(v)) for s, v in state["observations"]]
        decision = state.get("decision")
        self.decision = None if decision is None else Decision(**decision)


def replay(
    config: SwitchConfig, total_steps: int, observations: Iterable[tuple[int, float]]
) -> tuple[Decision, list[Check]]:
    """Where a run of `total_steps` steps that made these observations switches, and every check
    on the way: the policy fed boundary by boundary, exactly as the trainer feeds it."""
    policy = SwitchPolicy(config, total_steps)
    pending = sorted(observations)
    checks: list[Check] = []
    i = 0
    for step in range(1, total_steps + 1):
        while i < len(pending) and pending[i][0] <= step:
            policy.observe(*pending[i])
            i += 1
        check, decision = policy.decide(step)
        if check is not None:
            checks.append(check)
        if decision is not None:
            return decision, checks
    raise AssertionError("the ceiling always decides")  # pragma: no cover
