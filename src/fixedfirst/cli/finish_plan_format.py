"""`fixedfirst plan --model-config CONFIG.json`: the plan of a finish of a transformers looped
model at its size, printed as a table by depth (machine/finish_plan.py computes it)."""

from __future__ import annotations

import argparse

from fixedfirst.cli.plan_cmd import gib, hardware_line


def run_finish_plan(args: argparse.Namespace) -> int:
    from fixedfirst.cli.arguments import parse_depths
    from fixedfirst.cli.plan_cmd import hardware_from_args
    from fixedfirst.config import LowRankConfig
    from fixedfirst.errors import UserError
    from fixedfirst.machine.finish_plan import model_options, plan_finish

    if args.overrides:
        raise UserError(
            "--set changes a run configuration; --model-config plans from config.json alone"
        )
    for flag, value in (("--seq-len", args.seq_len), ("--micro-batch", args.micro_batch)):
        if value < 1:
            raise UserError(f"{flag} must be a positive whole number, got {value}")
    architecture, options = model_options(args.model_config)
    depths = parse_depths(args.depths)
    hardware = hardware_from_args(args, bf16=True, compiled=False)
    plan = plan_finish(
        architecture, options, hardware, args.seq_len, args.micro_batch, depths, LowRankConfig()
    )
    print(format_finish_plan(plan, args.model_config))
    return 0


def format_finish_plan(plan, path: str) -> str:
    """The plan's table, what it assumes, and what does not fit."""
    from fixedfirst.compute.memory import MARGIN

    full, adapted = plan.shapes[False], plan.shapes[True]
    h = plan.hardware
    strategy = "FSDP2 over the GPUs" if h.gpus > 1 else "one GPU"
    lines = [
        f"finishing plan for {path} ({plan.architecture}) on {hardware_line(h)}",
        f"{full.parameters / 1e9:,.2f}B parameters; low-rank adapters (rank 16, the default "
        f"[train.lowrank] targets) {adapted.trained / 1e6:,.1f}M trained",
        f"{strategy}, bf16 autocast over fp32 weights, micro-batches of {plan.micro_batch} x "
        f"{plan.seq_len} tokens per GPU; memory per GPU (GiB) of one finishing step at each "
        "depth (compute/looped_memory.py: fitted on the CPU, checked there within 10-20%; "
        "no GPU has run this architecture)",
        "",
        "| depth | training | checkpointing | weights | gradients | AdamW | activations | peak "
        f"| fits in {1 - MARGIN:.0%} | hours per 1e9 tokens |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for o in plan.options:
        m = o.memory
        lines.append(
            f"| {o.depth} | {'low-rank' if o.lowrank else 'full'} | "
            f"{'on' if o.checkpoint else 'off'} | {gib(m.parameters)} | {gib(m.gradients)} | "
            f"{gib(m.optimizer)} | {gib(m.activations)} | {gib(m.peak)} | "
            f"{'yes' if o.fits else 'no'} | {o.hours_per_billion:,.1f} |"
        )
    lines += ["", h.mfu.describe() + "; assumed for this architecture, which no GPU has run"]
    if h.gpus > 1:
        lines.append(
            f"the peak includes FSDP2's root unit (the looped layers with the embedding and head, "
            f"{full.root / 1e9:,.2f}B parameters), gathered in fp32 for the whole step "
            f"({gib(4 * full.root)} GiB per GPU), and full fine-tuning's root gradients, unsharded "
            "until the backward ends"
        )
    refused = [o for o in plan.options if not o.fits]
    if not refused:
        lines.append("everything fits")
    for lowrank in (False, True):
        for checkpoint in (False, True):
            out = [o.depth for o in refused if o.lowrank == lowrank and o.checkpoint == checkpoint]
            if out:
                what = f"{'low-rank' if lowrank else 'full'}, checkpointing "
                what += "on" if checkpoint else "off"
                lines.append(f"does not fit: {what} at depth {', '.join(map(str, out))}")
    return "\n".join(lines)
