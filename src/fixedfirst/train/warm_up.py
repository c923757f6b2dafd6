"""Before step 0: every graph a compiled run needs, built; on a GPU, the deepest step measured.

Left to the run, a compiled model builds a graph the first time a mode or shape meets the
compiler: the first evaluation mid-run (a no-grad iteration from the fixed evaluation state,
then one from the last state), truncated backprop's no-grad iterations at the first step deeper
than `train.grad_depth`; and the deepest depth the schedule draws, first drawn hours in after a
switch, is the first to find out whether memory holds. `warm_up` does all of it before step 0:
one forward and backward at the deepest depth with the run's micro-batch, precision, truncation
and checkpointing (the weights and AdamW untouched, the gradients dropped), and, compiled, one
evaluation at two depths of each shape of held-out batch the run scores (validation and the
auto switch's probe), in each precision it evaluates in. After it, sweeping depths 1..16 and
evaluating compiles nothing (tests/test_warm_up.py turns a recompile into an error).

On CUDA the forward and backward are measured: their peak, plus AdamW's moments that the first
optimizer step allocates, must leave MARGIN of the device free, or the run is refused in one
line before step 0 (docs/design.md §15). On the CPU the memory model's check stands
(train/memory_check.py), and an eager run has nothing to build.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fixedfirst.compute.memory import MARGIN
from fixedfirst.data.source import Batch
from fixedfirst.errors import UserError
from fixedfirst.evaluation.nll import validation_nll
from fixedfirst.model.memory import GIB, device_memory
from fixedfirst.train.peak_memory import step_peak
from fixedfirst.train.step import StepContext, forward_backward, state_seeds

GRAPH_DEPTHS = [1, 2]
"""An evaluation at these depths builds both of its iteration graphs (the first iteration reads
the evaluation state, broadcast over the batch; the others the previous state)."""


@dataclass(frozen=True)
class DeepestStep:
    """The warm-up's forward and backward at the deepest depth, as measured."""

    depth: int
    micro_batch: int
    forward_backward: int
    """Peak bytes of tensors during it (the weights and whatever else was allocated too)."""
    optimizer_state: int
    """Bytes of AdamW's moments, which the first optimizer step adds."""

    @property
    def peak(self) -> int:
        return self.forward_backward + self.optimizer_state

    def __str__(self) -> str:
        return f"depth {self.depth} measured {self.peak / GIB:,.2f} GiB with AdamW's moments"


def warm_up(
    context: StepContext,
    depth: int,
    seq_len: int,
    eval_batches: Sequence[Batch],
    eval_dtypes: Sequence[torch.dtype] = (),
    compiled: bool = False,
    capacity: int | None = None,
) -> DeepestStep | None:
    """Build the run's graphs (`compiled`) and, with a `capacity` in bytes, measure the deepest
    step and refuse it if it does not fit; the measurement (None when nothing was measured).
    Every process of a run calls it alike (the backward reduces gradients across them)."""
    device = next(context.model.module.parameters()).device
    if not compiled and capacity is None:
        return None
    measured = deepest_step(context, depth, seq_len, measure=capacity is not None)
    if compiled:
        shapes = {tuple(b.inputs.shape): b for b in eval_batches}
        model = context.model.module
        for dtype in eval_dtypes or [context.dtype]:
            for batch in shapes.values():
                validation_nll(model, [batch], GRAPH_DEPTHS, device, dtype)
        context.model.after_eval()
    if measured is not None and capacity is not None:
        check_deepest_step(measured, capacity, context)
    return measured


def capacity_to_measure(device: torch.device) -> int | None:
    """The memory the deepest step is measured against: a GPU's; None on the CPU, where the
    memory model's check stands (a step there cannot be measured without tracking every
    tensor, which is slow)."""
    return device_memory(device) if device.type == "cuda" else None


def deepest_step(
    context: StepContext, depth: int, seq_len: int, measure: bool
) -> DeepestStep | None:
    """One micro-batch's forward and backward at `depth` on random tokens, its gradients then
    dropped; its peak memory when `measure`."""
    module = context.model.module
    device = next(module.parameters()).device
    micro = context.train.micro_batch(context.model.world.world_size)
    tokens = torch.randint(
        0,
        module.vocab_size,
        (micro, seq_len + 1),
        generator=torch.Generator().manual_seed(0),  # the global RNG is the run's, untouched
    ).to(device)
    batch = Batch(tokens[:, :-1], tokens[:, 1:])
    per_token = torch.ones((), device=device) / batch.targets.numel()
    seeds = state_seeds(0, 0, range(micro))

    def step() -> None:
        forward_backward(context, batch, depth, seeds, per_token)

    try:
        if not measure:
            step()
            return None
        peak = step_peak(device, step, module, context.optimizer, batch.inputs, batch.targets)
    finally:
        context.optimizer.zero_grad(set_to_none=True)
    return DeepestStep(depth, micro, peak.tensors, unallocated_moments(context.optimizer))


def unallocated_moments(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the two AdamW moments of every parameter that has no optimizer state yet (this
    process's shard under FSDP2)."""
    total = 0
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p in optimizer.state:
                continue
            local = p.to_local() if hasattr(p, "to_local") else p
            total += 2 * local.numel() * local.element_size()
    return total


def check_deepest_step(measured: DeepestStep, capacity: int, context: StepContext) -> None:
    """Refuse, in one line, a deepest step whose measured peak leaves less than MARGIN of
    `capacity` free (`train.check_memory = false` trains anyway)."""
    t = context.train
    if not t.check_memory or measured.peak <= (1 - MARGIN) * capacity:
        return
    changes = []
    if measured.micro_batch > 1:
        changes.append("lower train.micro_batch_size")
    if not t.checkpoint_activations:
        changes.append("set train.checkpoint_activations = true")
    raise UserError(
        f"the run's deepest step (depth {measured.depth}, micro-batches of "
        f"{measured.micro_batch}) measured {measured.peak / GIB:,.1f} GiB before step 0 "
        f"(forward and backward {measured.forward_backward / GIB:,.1f} GiB, AdamW's moments "
        f"{measured.optimizer_state / GIB:,.1f} GiB), more than {1 - MARGIN:.0%} of this "
        f"device's {capacity / GIB:,.1f} GiB; "
        + " or ".join(changes or ["make the model smaller"])
        + " (`fixedfirst plan` shows what fits), or set train.check_memory = false to try anyway"
    )
