"""The `depth-gap` probe (docs/design.md §14): what the trainer measures for that auto-switch rule.

Every `switch.every` steps while the rule wants it (`DepthScheduler.probe_due`), held-out NLL at
K0 and at the deeper depth on the first `switch.batches` validation batches, in one pass of the
recurrence; the gain NLL(K0) - NLL(deeper) goes to `DepthScheduler.observe`, and a `switch_probe`
line to metrics.jsonl (rank 0's numbers: rank 0 writes the run, and its decision is the one every
rank follows). Each rank probes, since FSDP2 gathers the weights on every rank. A probe costs
forward FLOPs that no training counter holds, so they are counted apart (`probe_flops`) and
reported beside the training FLOPs: a rule is worth only what it saves net of what it costs.
"""

from __future__ import annotations

from typing import Any

import torch

from fixedfirst.compute.flops import RunCost
from fixedfirst.config import RunConfig
from fixedfirst.data.source import BatchSource
from fixedfirst.scheduling.depth_scheduler import DepthScheduler
from fixedfirst.train.parallel import ParallelModel


class DepthGapProbe:
    def __init__(
        self,
        config: RunConfig,
        flops: RunCost,
        source: BatchSource,
        dtype: torch.dtype,
    ) -> None:
        self.k0 = config.schedule.k0
        self.deep = config.switch.probe_depth(config.schedule.k_max)
        self.dtype = dtype
        self.batches = source.validation_batches(config.switch.batches, config.train.micro_batch())
        tokens = sum(b.inputs.numel() for b in self.batches)
        self.flops_per_probe = float(tokens * flops.eval_all_depths([self.k0, self.deep]))

    @classmethod
    def for_run(
        cls,
        config: RunConfig,
        flops: RunCost,
        source: BatchSource,
        dtype: torch.dtype,
    ) -> DepthGapProbe | None:
        """The run's probe: None unless its schedule switches by the `depth-gap` rule."""
        if not config.schedule.auto_switch or config.switch.rule != "depth-gap":
            return None
        return cls(config, flops, source, dtype)

    def feed(
        self, scheduler: DepthScheduler, parallel: ParallelModel, where: dict[str, Any]
    ) -> dict[str, Any]:
        """Probe the model at the boundary `where` says (its step, tokens and FLOPs), hand the gain
        to `scheduler`; the `switch_probe` line."""
        nll = parallel.evaluate(self.batches, sorted({self.k0, self.deep}), self.dtype)
        gain = nll[self.k0] - nll[self.deep]
        scheduler.observe(where["step"], gain)
        return {
            "kind": "switch_probe",
            **where,
            "k0": self.k0,
            "depth": self.deep,
            "nll_k0": nll[self.k0],
            "nll_deep": nll[self.deep],
            "gain": gain,
            "probe_flops": probe_flops(scheduler, self),
        }


def probe_flops(scheduler: DepthScheduler, probe: DepthGapProbe | None) -> float:
    """The modeled FLOPs of the probes made so far (none without a `depth-gap` rule)."""
    return scheduler.probes * (probe.flops_per_probe if probe is not None else 0.0)
