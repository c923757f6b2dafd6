"""A run's plan as someone else's training loop follows it, step by step.

`DepthScheduler.begin(step)` is called before each optimizer step's forwards: it decides an auto
switch due at that boundary, sets the model's depth through its handle and returns the step's
depth and phase (every micro-batch of the step shares them). `observe(step, value)` hands the
switch rule what it watches (the loop's loss for `plateau`, a probe's gain for `depth-gap`:
docs/design.md §14). Depths are a pure function of (seed, step), so every rank draws the same
ones; the switch decision, which each rank's own losses could put at different steps, is rank
0's, broadcast through torch.distributed when it is initialised. The rule's state is
`state_dict`, for the loop's checkpoints; with it a resumed loop switches where an uninterrupted
one does.
"""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

from fixedfirst.compute.plan import PlannedStep, RunPlan
from fixedfirst.model.handles import DepthHandle
from fixedfirst.switching.policy import Decision, SwitchPolicy


class DepthScheduler:
    """Follows `plan` (`compute.plan.plan_schedule`): each step's depth, set on the model through
    `handle` when given, and an auto switch decided from the loop's observations."""

    def __init__(self, plan: RunPlan[Any], handle: DepthHandle | None = None) -> None:
        self.plan = plan
        self.handle = handle
        switch = plan.switch
        self.policy = None if switch is None else SwitchPolicy(switch, plan.total_steps)
        if handle is not None:  # a depth the model cannot run is refused before the first step
            stages = plan.costed_schedule.stages(plan.total_steps)
            handle.set_depth(max(stage.dist.max_depth for stage in stages))

    def begin(self, step: int) -> PlannedStep:
        """Step `step` (0-based, every step in order) is about to train: decide an auto switch
        due here, set the model's depth, and return the step's depth and phase."""
        if self.policy is not None and self.policy.checks_at(step):
            self.adopt(shared_decision(self.policy.decide(step)[1]))
        planned = self.plan.at(step)
        if self.handle is not None:
            self.handle.set_depth(planned.depth)
        return planned

    def observe(self, step: int, value: float) -> None:
        """The value the switch rule watches after `step` steps: for `plateau` the loop's loss
        (every step, or at each log line), for `depth-gap` the gain NLL(K0) - NLL(deeper) of a
        held-out probe, measured when `probe_due(step)`. Ignored without an auto switch."""
        if self.policy is not None:
            self.policy.observe(step, value)

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
        """The auto switch's state (JSON); empty without one."""
        return {} if self.policy is None else {"switch": self.policy.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.policy is not None:
            self.policy.load_state_dict(state["switch"])
            self.adopt(self.policy.decision)


def shared_decision(decision: Decision | None) -> Decision | None:
    """Rank 0's decision on every rank (this process's own when torch.distributed is not in use):
    each rank calls this at the same boundaries, since whether one is due depends only on the
    step and on the decisions shared so far."""
    if not (dist.is_available() and dist.is_initialized()):
        return decision
    shared = [decision]
    dist.broadcast_object_list(shared, src=0)
    return shared[0]
