"""A run's plan as a training loop follows it, step by step: anyone's loop and fixedfirst's trainer.

`DepthScheduler.begin(step)` is called before each optimizer step's forwards: it decides an auto
switch due at that boundary, sets the model's depth through its handle and returns the step's
depth and phase (every micro-batch of the step shares them). `observe(step, value)` hands the
switch rule what it watches (the loop's loss for `plateau`, a probe's gain for `depth-gap`:
docs/design.md §14). Depths are a pure function of (seed, step), so every rank draws the same
ones; the switch decision, which each rank's own observations could put at different steps, is
rank 0's, broadcast through torch.distributed when it is initialised. The rule's state is
`state_dict`, for the loop's checkpoints; with it a resumed loop switches where an uninterrupted
one does.

A loop restarted after its auto switch has begun to count (its first `begin` at a step whose
observations the rule needs) without `load_state_dict` is refused in one line: the rule would
start over from none, train finishing steps at K0 again and switch a second time.

A loop whose checkpoint at a boundary must hold the decision made there (fixedfirst's trainer
tags its switch checkpoint) calls `decide(step)` before saving; the `begin(step)` after it does not
ask the rule again. Resumed from such a checkpoint, `begin(step)` does ask again, and gets the same
answer: the rule sees the same observations.
"""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

from fixedfirst.compute.memory import deepest_depth
from fixedfirst.compute.plan import PlannedStep, RunPlan
from fixedfirst.config.schema import coerce
from fixedfirst.errors import UserError
from fixedfirst.model.handles import DepthHandle, checked_handle
from fixedfirst.switching.policy import Check, Decision, SwitchPolicy


class DepthScheduler:
    """Follows `plan` (`compute.plan.plan_schedule`): each step's depth, set on the model through
    `handle` when given, and an auto switch decided from the loop's observations."""

    def __init__(self, plan: RunPlan[Any], handle: DepthHandle | None = None) -> None:
        if not isinstance(plan, RunPlan):
            raise UserError(
                f"DepthScheduler follows a plan (plan_schedule(...)), got {type(plan).__name__}"
            )
        self.plan = plan
        self.handle = None if handle is None else checked_handle(handle, "DepthScheduler's handle")
        switch = plan.switch
        self.policy = None if switch is None else SwitchPolicy(switch, plan.total_steps)
        self.probes = 0
        """`depth-gap`: how many probe gains the rule was fed (what the probes cost is counted
        from this)."""
        self.decided_through = -1
        """The last boundary at which this process asked the rule (-1: none yet)."""
        self.started = False
        """Whether a step was begun, a value observed or a saved state loaded (a restart is
        checked before)."""
        if handle is not None:  # a depth the model cannot run is refused before the first step
            handle.set_depth(deepest_depth(plan))

    def begin(self, step: int) -> PlannedStep:
        """Step `step` (0-based, every step in order) is about to train: decide an auto switch
        due here, set the model's depth, and return the step's depth and phase."""
        self.decide(step)
        planned = self.plan.at(step)
        if self.handle is not None:
            self.handle.set_depth(planned.depth)
        return planned

    def decide(self, step: int) -> tuple[Check | None, Decision | None]:
        """Ask the rule at boundary `step` (`step` steps done) if it is due there and this process
        did not ask it there yet (`decides_at`): the check this rank made (None: none) and the
        switch decided here (rank 0's decision, on every rank; None: no switch here)."""
        self.check_restart(step)
        if not self.decides_at(step):
            return None, None
        assert self.policy is not None
        check, decision = self.policy.decide(step)
        self.decided_through = step
        decision = shared_decision(decision)
        self.adopt(decision)
        return check, decision

    def check_restart(self, step: int) -> None:
        """Refuse a first step past the start of what the auto switch's rule keeps (the first
        observation its first check can see) with no saved state loaded: a loop restarted after
        it without `load_state_dict` would decide from none (and, past a switch, switch again)."""
        if self.started:
            return
        self.started = True
        if self.policy is None:
            return
        kept_from = self.policy.floor_step - self.policy.window_steps
        if step > max(0, kept_from):
            raise UserError(
                f"DepthScheduler starts at step {step}, but its auto switch decides from what "
                f"the loop observed since step {max(0, kept_from)}: load_state_dict(the "
                "state_dict() saved with your checkpoint) before the first begin(), or the run "
                "would train its finishing steps at K0 again and switch a second time"
            )

    def decides_at(self, step: int) -> bool:
        """Whether `decide(step)` (or `begin(step)`) asks the rule: a loop that brings its
        values to the host only now and then observes them before such a boundary."""
        return (
            self.policy is not None and step > self.decided_through and self.policy.checks_at(step)
        )

    def observe(self, step: int, value: float) -> None:
        """The value the switch rule watches after `step` steps: for `plateau` the loop's loss
        (every step, or at each log line), for `depth-gap` the gain NLL(K0) - NLL(deeper) of a
        held-out probe, measured when `probe_due(step)`. Ignored without an auto switch, and
        once it has switched."""
        if self.policy is None or self.policy.decision is not None:
            return
        step = coerce(step, int, "observe's step")
        latest = self.policy.observations[-1][0] if self.policy.observations else None
        if latest is not None and step <= latest:
            raise UserError(
                f"observe(step={step}) after observe(step={latest}): the switch rule takes one "
                "value per optimizer step, in order (the step's loss, e.g. the mean over its "
                "micro-batches, once after the optimizer step)"
            )
        self.policy.observe(step, float(value))
        self.started = True  # the rule has what the loop gave it
        if self.rule == "depth-gap":
            self.probes += 1

    def probe_due(self, step: int) -> bool:
        """`depth-gap`: whether the rule wants the gain from depth measured after `step` steps."""
        return self.policy is not None and self.policy.wants_probe(step)

    @property
    def rule(self) -> str | None:
        """The auto switch's rule, None when the schedule switches at a given fraction or step."""
        return None if self.policy is None else self.policy.config.rule

    @property
    def switch_step(self) -> int | None:
        return self.plan.switch_step

    def adopt(self, decision: Decision | None) -> None:
        assert self.policy is not None
        self.policy.decision = decision
        if decision is not None:
            self.plan = self.plan.decided(decision.step)

    def state_dict(self) -> dict[str, Any]:
        """The auto switch's state (JSON): the rule's observations and decision, and the probes
        counted; empty without an auto switch."""
        if self.policy is None:
            return {}
        return {"switch": self.policy.state_dict(), "probes": self.probes}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state_dict`'s state (one saved before probes were counted counts
        none)."""
        if self.policy is None:
            if state:
                raise UserError(
                    "this plan has no auto switch, but the state loaded holds one: load the "
                    "state saved with this plan (state_dict() of its own scheduler)"
                )
            return
        saved = state.get("switch") if isinstance(state, dict) else None
        if not isinstance(saved, dict) or "observations" not in saved:
            raise UserError(
                f"this plan's auto switch needs its saved state, {{'switch': ..., 'probes': "
                f"...}} as state_dict() returned it; got {shown_keys(state)}"
            )
        self.policy.load_state_dict(saved)
        self.probes = int(state.get("probes", 0))
        self.adopt(self.policy.decision)
        self.started = True


def shown_keys(state: Any) -> str:
    if not isinstance(state, dict):
        return type(state).__name__
    return f"keys {sorted(state)}" if state else "an empty dict"


def shared_decision(decision: Decision | None) -> Decision | None:
    """Rank 0's decision on every rank (this process's own when torch.distributed is not in use):
    each rank calls this at the same boundaries, since whether one is due depends only on the
    step and on the decisions shared so far."""
    if not (dist.is_available() and dist.is_initialized()):
        return decision
    shared = [decision]
    dist.broadcast_object_list(shared, src=0)
    return shared[0]
