"""`fixedfirst compute`: what a configuration costs under the compute model, and what it saves."""

from __future__ import annotations

import argparse
import json

from fixedfirst.cli.arguments import add_config_arguments, config_from_args
from fixedfirst.compute.flops import RunCost, train_flops
from fixedfirst.compute.plan import UNIFORM_REFERENCE, RunPlan
from fixedfirst.config import RunConfig
from fixedfirst.data.prepared import is_prepared, passes_note
from fixedfirst.schedules import Schedule, describe

SHOWN_DEPTHS = (1, 2, 4, 8, 16, 32, 64)


def register(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.set_defaults(run=run)


def notes(config: RunConfig, budget: RunPlan[RunCost]) -> list[str]:
    """What the plan does that its configuration may not mean: a fixed-first switch that
    leaves no finishing step, a budget of several passes over the data."""
    found = []
    finish = no_finishing_step(config, budget)
    if finish is not None:
        found.append(finish)
    path = config.data.path  # a plan may come before the data: none prepared, nothing said
    if config.data.kind == "tokens" and path is not None and is_prepared(path):
        passes = passes_note(path, budget.tokens)
        if passes is not None:
            found.append(passes)
    return found


def no_finishing_step(config: RunConfig, budget: RunPlan[RunCost]) -> str | None:
    """The words for a fixed-first run whose switch leaves no step after it (a fixed K0 run
    reported as fixed-first); None when it leaves one, or decides its switch itself."""
    schedule = config.schedule
    switch = budget.switch_step
    if schedule.kind != "fixed-first" or switch is None or switch < budget.total_steps:
        return None
    return (
        f"schedule.switch = {schedule.switch} of {budget.total_steps} steps leaves "
        f"{budget.total_steps - switch} finishing steps: every step trains at K0 = "
        f"{schedule.k0}, a fixed-depth run, not fixed-first; lower schedule.switch, or raise "
        "the budget"
    )


def report(config) -> dict:
    from fixedfirst.compute.measured import MeasuredFlops
    from fixedfirst.compute.run_cost import run_plan
    from fixedfirst.model.kinds import parameter_counts

    t = config.train
    budget = run_plan(config)
    fm = budget.flop_model
    schedule = budget.costed_schedule  # an auto switch at its floor
    auto = None
    if budget.switch_window is not None:  # and its dearest switch as a rule
        floor, ceiling = budget.switch_window
        at_ceiling = budget.decided(ceiling)
        auto = {
            "rule": config.switch.rule,
            "floor_step": floor,
            "ceiling_step": ceiling,
            "realised_flops_at_ceiling": train_flops(
                fm, at_ceiling.histogram(), t.tokens_per_step, t.grad_depth
            ),
            "modeled_savings_at_ceiling": at_ceiling.modeled_savings(),
        }
    reference = Schedule(UNIFORM_REFERENCE, t.seed).expected_histogram(budget.total_steps)
    uniform = train_flops(fm, reference, t.tokens_per_step, t.grad_depth)
    stages = [
        {
            "phase": s.phase,
            "steps": s.steps,
            "depth": str(s.dist),
            "mean_depth": s.dist.mean,
            "flops": t.tokens_per_step
            * s.steps
            * s.dist.expectation(lambda k: fm.train(k, t.grad_depth)),
        }
        for s in schedule.stages(budget.total_steps)
    ]
    measured = None
    if isinstance(fm, MeasuredFlops):  # a model we did not write: its FLOPs were counted
        measured = {
            "model": config.model.architecture,
            "depths": [depth for depth, _, _ in fm.measured],
            "train_flops_per_token": [train for _, train, _ in fm.measured],
            "forward_flops_per_token": [forward for _, _, forward in fm.measured],
        }
    return {
        "schedule": describe(config.schedule),
        "parameters": parameter_counts(config.model),
        "measured": measured,
        "seq_len": t.seq_len,
        "forward_flops_per_token": {str(k): fm.forward(k) for k in SHOWN_DEPTHS},
        "train_flops_per_token": {str(k): fm.train(k, t.grad_depth) for k in SHOWN_DEPTHS},
        "non_recurrent_ratio": fm.non_recurrent_ratio,
        "steps": budget.total_steps,
        "tokens": budget.tokens,
        "compute_matched": budget.compute_matched,
        "stages": stages,
        "schedule_flops": budget.expected_flops,
        "realised_flops": budget.flops,
        "flop_budget": budget.flop_budget,
        "uniform_flops": uniform,
        "modeled_savings": budget.modeled_savings(),
        "auto_switch": auto,
        "notes": notes(config, budget),
    }


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    r = report(config)
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    p, m = r["parameters"], r["measured"]
    if m is not None:
        print(f"model: transformers' {m['model']}")
    print(f"schedule: {r['schedule']}")
    parts = ", ".join(f"{k} {v / 1e6:.2f}M" for k, v in p.items() if k != "total")
    print(f"parameters: {parts + '; ' if parts else ''}total {p['total'] / 1e6:.2f}M")
    if m is not None:
        counted = ", ".join(
            f"K={k}: {f:.4e} / {t:.4e}"
            for k, f, t in zip(
                m["depths"], m["forward_flops_per_token"], m["train_flops_per_token"], strict=True
            )
        )
        print(f"measured by torch's FlopCounterMode, per token (forward / training): {counted}")
        print("  every other depth from the straight line through them:")
    print(f"FLOPs per token at seq_len {r['seq_len']} (forward / training):")
    for k in SHOWN_DEPTHS:
        fwd, trn = r["forward_flops_per_token"][str(k)], r["train_flops_per_token"][str(k)]
        print(f"  K={k:<3d} {fwd:.3e} / {trn:.3e}")
    print(f"non-recurrent work / one core iteration: {r['non_recurrent_ratio']:.3f}")
    matched = " (planned from train.flops)" if r["compute_matched"] else ""
    print(f"budget: {r['steps']} steps, {r['tokens']:.4g} tokens{matched}")
    for s in r["stages"]:
        print(
            f"  {s['phase']:<10s} {s['steps']:>8d} steps  {s['depth']:<28s} "
            f"mean K {s['mean_depth']:.2f}  {s['flops']:.3e} FLOPs"
        )
    print(f"schedule training FLOPs:   {r['schedule_flops']:.4e} (expected)")
    realised = f"realised by seed {config.train.seed}'s depths: {r['realised_flops']:.4e}"
    if r["flop_budget"] is not None:
        realised += f" of the budget {r['flop_budget']:.4e}"
    print(realised)
    print(f"uniform 1..16 at same tokens: {r['uniform_flops']:.4e}")
    print(f"modeled savings: {100 * r['modeled_savings']:.1f}%")
    a = r["auto_switch"]
    if a is not None:
        print(
            f"auto switch ({a['rule']}): between step {a['floor_step']} and {a['ceiling_step']}; "
            "the plan above switches at the floor, the most the run can spend; at the ceiling: "
            f"{a['realised_flops_at_ceiling']:.4e} FLOPs, "
            f"modeled savings {100 * a['modeled_savings_at_ceiling']:.1f}%"
        )
    for note in r["notes"]:
        print(f"note: {note}")
    return 0
