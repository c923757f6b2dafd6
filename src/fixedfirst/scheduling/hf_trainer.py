"""Fixed-first in the Hugging Face Trainer: a `TrainerCallback` that follows a run's plan.

Imported only when asked for (it imports transformers: `pip install 'fixedfirst[looped]'`). The
Trainer calls `on_step_begin` once per optimizer step, before the forwards of all its
micro-batches, so under gradient accumulation they share the step's depth. The callback logs
depth and phase beside the loss (in the logs later callbacks see and in `log_history`), feeds
the logged loss to a `plateau` auto switch, and keeps the switch's state in the Trainer's own
checkpoints (trainer_state.json's `stateful_callbacks`, under STATE_KEY), so a Trainer resumed
from a checkpoint continues the schedule where it stopped; the depths themselves are a pure
function of the step, which the Trainer restores.
"""

from __future__ import annotations

from typing import Any

from fixedfirst.compute.plan import RunPlan
from fixedfirst.errors import UserError
from fixedfirst.model.handles import DepthHandle, checked_handle, depth_handle
from fixedfirst.scheduling.depth_scheduler import DepthScheduler
from fixedfirst.switching.policy import check_window

try:
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
except ImportError:
    raise UserError(
        "FixedFirstCallback needs transformers' Trainer: pip install 'fixedfirst[looped]'"
    ) from None

STATE_KEY = "fixedfirst"
"""The callback's entry in trainer_state.json's `stateful_callbacks`. It is not the callback's
class name, so a Trainer with `restore_callback_states_from_checkpoint` does not try to rebuild
the callback from it (it warns that it ignores the entry; the callback restores it itself)."""


class FixedFirstCallback(TrainerCallback):
    """Sets the model's depth before each optimizer step from `plan` (whose `total_steps` must be
    the Trainer's `max_steps`), through `handle` (default: `depth_handle(model)`)."""

    def __init__(self, plan: RunPlan[Any], handle: DepthHandle | None = None) -> None:
        if not isinstance(plan, RunPlan):
            raise UserError(
                f"FixedFirstCallback follows a plan (plan_schedule(...)), got {type(plan).__name__}"
            )
        self.plan = plan
        self.handle = (
            None if handle is None else checked_handle(handle, "FixedFirstCallback's handle")
        )
        self.scheduler: DepthScheduler | None = None

    def on_train_begin(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        model: Any = None,
        **kwargs: Any,
    ) -> None:
        if state.max_steps != self.plan.total_steps:
            raise UserError(
                f"the Trainer runs {state.max_steps} optimizer steps but the plan has "
                f"{self.plan.total_steps}; set TrainingArguments(max_steps=plan.total_steps)"
            )
        if self.plan.switch is not None and self.plan.switch.rule != "plateau":
            raise UserError(
                f"the Trainer callback feeds an auto switch the logged loss (rule 'plateau'), "
                f"not the probes of {self.plan.switch.rule!r}; use DepthScheduler in your loop"
            )
        if self.plan.switch is not None:  # the rule sees one loss per log line
            if str(getattr(args.logging_strategy, "value", args.logging_strategy)) != "steps":
                raise UserError(
                    "an auto switch watches the logged loss, but the Trainer logs "
                    f"{args.logging_strategy!r}: set TrainingArguments(logging_strategy='steps')"
                )
            key = "TrainingArguments(logging_steps=...)"
            check_window(self.plan.switch, self.plan.total_steps, state.logging_steps, key)
        handle = self.handle if self.handle is not None else depth_handle(model)
        self.scheduler = DepthScheduler(self.plan, handle)
        saved = stored_states(state).get(STATE_KEY)
        if saved:  # a resumed Trainer: the switch's observations and decision so far
            self.scheduler.load_state_dict(saved)
        elif self.plan.switch is not None:  # so that every checkpoint holds it, even the first
            stored_states(state)[STATE_KEY] = self.scheduler.state_dict()

    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        scheduler = self.started()
        decided = scheduler.switch_step
        scheduler.begin(state.global_step)
        if scheduler.switch_step != decided:
            stored_states(state)[STATE_KEY] = scheduler.state_dict()

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        scheduler, step = self.started(), state.global_step
        if logs is None or "loss" not in logs or step == 0:
            return
        if scheduler.rule is not None:
            scheduler.observe(step, float(logs["loss"]))
            stored_states(state)[STATE_KEY] = scheduler.state_dict()
        last = scheduler.plan.at(step - 1)  # the step this log line closes
        shown = {"depth": last.depth, "phase": last.phase}
        logs.update(shown)
        history: list[dict[str, Any]] = state.log_history
        if history and history[-1].get("step") == step:  # the Trainer's record of this line
            history[-1].update(shown)

    def started(self) -> DepthScheduler:
        if self.scheduler is None:
            raise UserError("FixedFirstCallback was not started: pass it to Trainer(callbacks=...)")
        return self.scheduler


def stored_states(state: TrainerState) -> dict[str, Any]:
    """trainer_state.json's `stateful_callbacks`: typed as the list of callbacks the Trainer
    builds it from, a dict of their states once built (and once read from a checkpoint)."""
    stored = state.stateful_callbacks
    if not isinstance(stored, dict):
        raise TypeError(f"TrainerState.stateful_callbacks is {type(stored).__name__}, not a dict")
    return stored
