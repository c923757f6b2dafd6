"""What a run keeps of its auto switch (docs/design.md §14), which `DepthScheduler` decides.

metrics.jsonl gets a `switch_probe` line per probe (train/switch_probe.py), a `switch_check` line
per check of the rule and one `switch` line at the decision; the switch checkpoint is tagged
`switch` and `auto-RULE` (or `auto-ceiling`); every checkpoint's meta.json holds the scheduler's
state (`depth_scheduler`: `DepthScheduler.state_dict`), from which a resumed run continues;
summary.json says where and why the run switched. Checkpoints written before the trainer followed
the scheduler hold the switch's state in another form (`auto_switch`: the policy's state and the
probe count) and are read as the scheduler's (`scheduler_state`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fixedfirst.config import RunConfig, TrainConfig
from fixedfirst.errors import UserError
from fixedfirst.schedules import Schedule
from fixedfirst.scheduling.depth_scheduler import DepthScheduler
from fixedfirst.switching.policy import Check, Decision
from fixedfirst.train.optim import lr_at
from fixedfirst.train.switch_probe import DepthGapProbe, probe_flops

META_KEY = "depth_scheduler"
"""Where a checkpoint's meta.json holds the depth scheduler's state."""
EARLIER_META_KEY = "auto_switch"
"""Where checkpoints written before it held an auto switch's state: {"policy": the policy's
`state_dict`, "probes": the probes made}."""


def scheduler_state(meta: dict[str, Any], auto_in: Path | None = None) -> dict[str, Any]:
    """The depth scheduler's state in a checkpoint's meta.json, in either form (empty: none).
    `auto_in`: the checkpoint of a run whose switch is auto, which must hold one (refused in one
    line when it holds neither form)."""
    if META_KEY in meta:
        return dict(meta[META_KEY])
    earlier = meta.get(EARLIER_META_KEY)
    if earlier is None:
        if auto_in is not None:
            raise UserError(
                f"{auto_in / 'meta.json'} holds no auto switch state (neither '{META_KEY}' nor "
                f"'{EARLIER_META_KEY}'), which this run (schedule.switch = 'auto') resumes "
                "from; resume from a checkpoint the run wrote itself, or train it anew in "
                "another --out"
            )
        return {}
    return {"switch": earlier["policy"], "probes": earlier["probes"]}


def checkpoint_schedule(config: RunConfig, meta: dict[str, Any]) -> Schedule:
    """The schedule as a checkpoint of the run knows it: for an auto switch, switched at the
    step its run decided on by then (not switched yet: every step so far at K0)."""
    schedule = Schedule(config.schedule, config.train.seed)
    decision = scheduler_state(meta).get("switch", {}).get("decision")
    return schedule.with_switch_step(int(decision["step"])) if decision else schedule


def decision_records(
    scheduler: DepthScheduler,
    probe: DepthGapProbe | None,
    where: dict[str, Any],
    check: Check | None,
    decision: Decision | None,
) -> list[dict[str, Any]]:
    """The lines of `scheduler.decide` at the boundary `where` says (its step, tokens and FLOPs):
    the check made there, then the decision."""
    records: list[dict[str, Any]] = []
    if check is not None:
        records.append(check.record(str(scheduler.rule)))
    if decision is not None:
        records.append(
            {
                "kind": "switch",
                **where,
                "fraction": decision.fraction,
                "rule": decision.rule,
                "reason": decision.reason,
                "probe_flops": probe_flops(scheduler, probe),
            }
        )
    return records


def switch_summary(
    scheduler: DepthScheduler, probe: DepthGapProbe | None, train: TrainConfig
) -> dict[str, Any] | None:
    """summary.json's `switch`: where a fixed-first run switched (None for other schedules), and
    the learning rate there and over the finishing stage (a cosine schedule gives the finish a
    fraction of the peak rate, a warmup-stable-decay one need not)."""
    plan, policy = scheduler.plan, scheduler.policy
    step, total_steps = plan.switch_step, plan.total_steps
    if step is None and policy is None:
        return None
    out: dict[str, Any] = {
        "auto": policy is not None,
        "step": step,
        "fraction": None if step is None else step / total_steps,
    }
    if step is not None and step < total_steps:
        finish = [lr_at(s, total_steps, train) for s in range(step, total_steps)]
        out.update(
            lr=lr_at(step, total_steps, train),
            mean_finish_lr=sum(finish) / len(finish),
            peak_lr=train.lr,
        )
    if policy is not None:
        decision = policy.decision
        out.update(
            rule=scheduler.rule,
            reason=None if decision is None else decision.reason,
            floor_step=policy.floor_step,
            ceiling_step=policy.ceiling_step,
            probes=scheduler.probes,
            probe_flops=probe_flops(scheduler, probe),
        )
    return out
