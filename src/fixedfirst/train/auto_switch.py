"""The trainer's side of an auto switch (docs/design.md §14): observations, records, checkpoints.

`switching.policy` decides from observations; this module makes them and keeps the run's record
of them. For `plateau` the observations are the training losses the trainer logs (the mean over
ranks, the same floats on every rank). For `depth-gap` they are probes: held-out NLL at K0 and at
the deeper depth on the first `switch.batches` validation batches, in one pass of the recurrence,
every `switch.every` steps; rank 0's numbers are broadcast, so every rank decides the same. A probe
costs forward FLOPs that no training counter holds, so they are counted here (`probe_flops`) and
reported beside the training FLOPs: a rule is worth only what it saves net of what it costs.

What the run keeps: metrics.jsonl gets a `switch_probe` line per probe, a `switch_check` line per
check of the rule and one `switch` line at the decision; the switch checkpoint is tagged `switch`
and `auto-RULE` (or `auto-ceiling`); every checkpoint's meta.json holds the policy's state, from
which a resumed run continues; summary.json says where and why the run switched.
"""

from __future__ import annotations

from typing import Any

import torch

from fixedfirst.compute.flops import RunCost
from fixedfirst.compute.plan import RunPlan
from fixedfirst.config import RunConfig, TrainConfig
from fixedfirst.data.source import BatchSource
from fixedfirst.evaluation.nll import validation_nll
from fixedfirst.schedules import Schedule
from fixedfirst.switching.policy import Decision, SwitchPolicy
from fixedfirst.train import distributed
from fixedfirst.train.counters import Counters
from fixedfirst.train.distributed import World
from fixedfirst.train.optim import lr_at
from fixedfirst.train.parallel import ParallelModel

META_KEY = "auto_switch"
"""Where a checkpoint's meta.json holds the auto switch's state."""


class AutoSwitch:
    def __init__(
        self,
        config: RunConfig,
        total_steps: int,
        flops: RunCost,
        source: BatchSource,
        world: World,
        device: torch.device,
        dtype: torch.dtype,
    ) -> None:
        self.rule = config.switch.rule
        self.policy = SwitchPolicy(config.switch, total_steps)
        self.k0 = config.schedule.k0
        self.deep = config.switch.probe_depth(config.schedule.k_max)
        self.world, self.device, self.dtype = world, device, dtype
        self.probe_batches = (
            source.validation_batches(config.switch.batches, config.train.micro_batch())
            if self.rule == "depth-gap"
            else []
        )
        tokens = sum(b.inputs.numel() for b in self.probe_batches)
        self.flops_per_probe = float(tokens * flops.eval_all_depths([self.k0, self.deep]))
        self.probes = 0

    @classmethod
    def for_run(
        cls,
        config: RunConfig,
        total_steps: int,
        flops: RunCost,
        source: BatchSource,
        world: World,
        device: torch.device,
        dtype: torch.dtype,
    ) -> AutoSwitch | None:
        """The run's auto switch, or None when its schedule switches at a fixed fraction."""
        if not config.schedule.auto_switch:
            return None
        return cls(config, total_steps, flops, source, world, device, dtype)

    def due(self, step: int) -> bool:
        """Whether boundary `step` needs the losses so far on the host, a probe or a check."""
        return self.policy.due(step)

    def observe(self, records: list[dict[str, Any]]) -> None:
        """The trainer's freshly logged training records (`plateau` watches their losses)."""
        if self.rule == "plateau":
            for r in records:
                self.policy.observe(r["step"], r["loss"])

    def at_boundary(
        self, step: int, parallel: ParallelModel, counters: Counters
    ) -> tuple[list[dict[str, Any]], Decision | None]:
        """Probe and check at boundary `step`: the metrics records to write, and the decision
        when the run switches here."""
        records: list[dict[str, Any]] = []
        where = {"step": step, "tokens": counters.tokens, "flops": counters.flops}
        if self.policy.wants_probe(step):
            depths = sorted({self.k0, self.deep})
            nll = validation_nll(
                parallel.module, self.probe_batches, depths, self.device, self.dtype
            )
            parallel.after_eval()
            nll = distributed.broadcast_object(self.world, nll)
            self.probes += 1
            gain = nll[self.k0] - nll[self.deep]
            self.policy.observe(step, gain)
            records.append(
                {
                    "kind": "switch_probe",
                    **where,
                    "k0": self.k0,
                    "depth": self.deep,
                    "nll_k0": nll[self.k0],
                    "nll_deep": nll[self.deep],
                    "gain": gain,
                    "probe_flops": self.probe_flops,
                }
            )
        check, decision = self.policy.decide(step)
        if check is not None:
            records.append(check.record(self.rule))
        if decision is not None:
            records.append(
                {
                    "kind": "switch",
                    **where,
                    "fraction": decision.fraction,
                    "rule": decision.rule,
                    "reason": decision.reason,
                    "probe_flops": self.probe_flops,
                }
            )
        return records, decision

    @property
    def probe_flops(self) -> float:
        return self.probes * self.flops_per_probe

    def state_dict(self) -> dict[str, Any]:
        return {"policy": self.policy.state_dict(), "probes": self.probes}

    def restore(self, meta: dict[str, Any]) -> int | None:
        """Continue from a checkpoint's state; the switch step if the run had switched."""
        state = meta[META_KEY]
        self.policy.load_state_dict(state["policy"])
        self.probes = int(state["probes"])
        decision = self.policy.decision
        return None if decision is None else decision.step

    def summary(self) -> dict[str, Any]:
        decision = self.policy.decision
        return {
            "rule": self.rule,
            "reason": None if decision is None else decision.reason,
            "floor_step": self.policy.floor_step,
            "ceiling_step": self.policy.ceiling_step,
            "probes": self.probes,
            "probe_flops": self.probe_flops,
        }


def switch_summary(
    plan: RunPlan, auto: AutoSwitch | None, train: TrainConfig
) -> dict[str, Any] | None:
    """summary.json's `switch`: where a fixed-first run switched (None for other schedules), and
    the learning rate there and over the finishing stage (a cosine schedule gives the finish a
    fraction of the peak rate, a warmup-stable-decay one need not)."""
    step, total_steps = plan.switch_step, plan.total_steps
    if step is None and auto is None:
        return None
    out: dict[str, Any] = {
        "auto": auto is not None,
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
    return {**out, **auto.summary()} if auto is not None else out


def checkpoint_schedule(config: RunConfig, meta: dict[str, Any]) -> Schedule:
    """The schedule as a checkpoint of the run knows it: for an auto switch, switched at the
    step its run decided on by then (not switched yet: every step so far at K0)."""
    schedule = Schedule(config.schedule, config.train.seed)
    decision = (meta.get(META_KEY) or {}).get("policy", {}).get("decision")
    return schedule.with_switch_step(int(decision["step"])) if decision else schedule
