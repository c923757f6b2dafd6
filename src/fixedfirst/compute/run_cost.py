"""The compute model of the model a run's `[model]` names, and the run's plan under it: ours
derived from its shape (compute/flops.py), a transformers looped architecture measured
(compute/measured.py). Everything that plans a run of either kind plans it here."""

from __future__ import annotations

from fixedfirst.compute.flops import RunCost, flop_model
from fixedfirst.compute.measured import measured_cost
from fixedfirst.compute.plan import RunPlan, plan_costed_run
from fixedfirst.config import RunConfig, TransformersModelConfig


def run_cost(config: RunConfig) -> RunCost:
    """The compute model of the run's model at its training sequence length."""
    model, seq_len = config.model, config.train.seq_len
    if isinstance(model, TransformersModelConfig):
        deepest = config.schedule.deepest_depth  # where the plan checks the measured line
        return measured_cost(model, seq_len, config.train.lowrank, deepest)
    return flop_model(model, seq_len)


def run_plan(config: RunConfig, total_steps: int | None = None) -> RunPlan[RunCost]:
    """The run's plan under its model's compute model (`compute.plan.plan_costed_run`)."""
    return plan_costed_run(config, run_cost(config), total_steps)
