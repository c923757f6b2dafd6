"""`fixedfirst plan`: will a run fit on these GPUs, with which settings, and how long will it
take? A run of a transformers looped architecture (`[model] kind = "transformers"`) is planned
with that architecture's memory model (compute/looped_memory.py), a row per depth its schedule
draws. With `--model-config CONFIG.json`: what a finish of such a model would need at each
depth, from its configuration alone (machine/finish_plan.py)."""

from __future__ import annotations

import argparse
import math

from fixedfirst.cli.arguments import add_config_arguments

EPILOG = """\
The GPU is a kind from the table below (memory and bf16 peak from vendors' datasheets), or
--gpu-memory and --peak-flops for another; on a machine with a GPU the default is that GPU,
with its peak measured. Memory is per GPU at the deepest depth the schedule draws; "fits" means
at most 90% of the GPU's memory (the rest is for the CUDA context and fragmentation). A sweep
file (configs/sweeps/*.toml) is planned run by run. A run of a transformers looped architecture
([model] kind = "transformers") is planned with its own memory model: a row per depth the
schedule draws, as the run trains (its [train.lowrank] adapters or every weight, its strategy
and micro-batches), checkpointing off and on, with hours per billion tokens; its FLOPs are
counted from the shape, no weights built. --model-config CONFIG.json plans a finish of a
transformers looped model from its config.json alone (no weights): memory per GPU by depth,
full and low-rank, with and without checkpointing, under FSDP2, and hours per billion tokens.
"""


FINISH_DEFAULTS: tuple[str, int, int] = ("1..6", 4096, 1)
"""--depths, --seq-len and --micro-batch of a plan from --model-config (a run has its own)."""


def register(parser: argparse.ArgumentParser) -> None:
    from fixedfirst.machine.accelerators import ACCELERATORS

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    kinds = "\n".join(f"  {k:10s} {a.name}" for k, a in ACCELERATORS.items())
    parser.epilog = EPILOG + "\nGPU kinds:\n" + kinds
    add_config_arguments(parser, required=False)
    parser.add_argument(
        "--model-config",
        metavar="CONFIG.json",
        help="plan a finish of a transformers looped model from its config.json alone (no weights)",
    )
    parser.add_argument(
        "--depths", help=f"finishing depths to plan (--model-config; default {FINISH_DEFAULTS[0]})"
    )
    parser.add_argument(
        "--seq-len",
        type=int,
        metavar="T",
        help=f"tokens per sequence (--model-config; default {FINISH_DEFAULTS[1]})",
    )
    parser.add_argument(
        "--micro-batch",
        type=int,
        metavar="B",
        help=f"sequences per GPU (--model-config; default {FINISH_DEFAULTS[2]})",
    )
    parser.add_argument("--gpus", type=int, metavar="N", help="GPUs (default: 1, or all here)")
    parser.add_argument(
        "--gpu", metavar="KIND", help="GPU kind (default: this machine's GPU, else h100)"
    )
    parser.add_argument("--gpu-memory", type=float, metavar="GIB", help="memory per GPU (GiB)")
    parser.add_argument(
        "--peak-flops", type=float, metavar="TFLOPS", help="peak matmul rate per GPU (TFLOP/s)"
    )
    parser.add_argument(
        "--mfu", type=float, metavar="F", help="model FLOP utilisation for the wall-clock"
    )
    parser.add_argument(
        "--measured",
        metavar="DIR",
        help="the MFU by depth from a first run's output (benchmarks/first_run.py --out DIR)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fixedfirst.config import read_toml
    from fixedfirst.errors import UserError
    from fixedfirst.machine.planning import plan_on_gpus

    if (args.config is None) == (args.model_config is None):
        raise UserError("give a run configuration CONFIG.toml or --model-config CONFIG.json, one")
    if args.model_config is not None:
        return run_finish_plan(args)
    finish_flags = (
        ("--depths", args.depths, "the depths its schedule draws ([schedule])"),
        ("--seq-len", args.seq_len, "train.seq_len"),
        ("--micro-batch", args.micro_batch, "train.micro_batch_size"),
    )
    for flag, value, own in finish_flags:
        if value is not None:
            raise UserError(
                f"{flag} is for --model-config; a run configuration plans with its own {own}: "
                "change it with --set, or leave the flag out"
            )
    configs = run_configs(args, is_sweep="runs" in read_toml(args.config))
    first = next(iter(configs.values()))
    # A first run's compiled MFU is our compiled model's; a transformers model trains eagerly.
    compiled = not any(looped(config) for config in configs.values())
    hardware = hardware_from_args(args, first.train.precision != "fp32", compiled)
    plans = {name: plan_on_gpus(config, hardware) for name, config in configs.items()}
    if len(plans) == 1 and None in plans:
        print(format_plan(plans[None], args.config))
    else:
        print(format_sweep(plans, args.config))
    return 0


def run_configs(args: argparse.Namespace, is_sweep: bool) -> dict:
    """name -> configuration: one unnamed for a run file, one per run of a sweep file, each with
    the `--set` overrides applied."""
    from fixedfirst.cli.arguments import config_from_args
    from fixedfirst.config import RunConfig, apply_overrides
    from fixedfirst.data.registry import resolve_data
    from fixedfirst.studies.sweep import load_sweep

    if not is_sweep:
        return {None: config_from_args(args)}
    runs = load_sweep(args.config).runs
    return {
        r.name: resolve_data(
            RunConfig.from_dict(apply_overrides(r.config.to_dict(), args.overrides))
        )
        for r in runs
    }


def hardware_from_args(args: argparse.Namespace, bf16: bool, compiled: bool = True):
    """The GPUs to plan for: a kind from the table, this machine's GPU, or the flags' numbers
    (which also override a kind's); `compiled`: a first run's compiled MFU where it has one."""
    import torch

    from fixedfirst.errors import UserError
    from fixedfirst.machine.accelerators import accelerator
    from fixedfirst.machine.planning import (
        MAX_GPUS,
        REFERENCE,
        REFERENCE_MFU,
        Hardware,
        MfuByDepth,
        measured_mfu,
    )
    from fixedfirst.model.memory import GIB

    here = torch.cuda.is_available() and args.gpu is None
    gpus = args.gpus if args.gpus is not None else (torch.cuda.device_count() if here else 1)
    if not 1 <= gpus <= MAX_GPUS:
        raise UserError(f"--gpus must be in 1..{MAX_GPUS}, got {gpus}")
    for flag, value in (("--gpu-memory", args.gpu_memory), ("--peak-flops", args.peak_flops)):
        if value is not None and not 0 < value < float("inf"):
            raise UserError(f"{flag} must be a positive number, got {value}")
    if args.mfu is not None and args.measured is not None:
        raise UserError("--mfu and --measured both say what the MFU is; give one of them")
    if args.mfu is not None and not 0 < args.mfu <= 1:
        raise UserError(f"--mfu must be in (0, 1], got {args.mfu}")
    if args.measured is not None:
        mfu = measured_mfu(args.measured, compiled)
    elif args.mfu is not None:
        mfu = MfuByDepth.flat(args.mfu, "--mfu")
    else:
        mfu = MfuByDepth.flat(REFERENCE_MFU, REFERENCE)
    if here:
        from fixedfirst.machine.device import measured_peak_flops

        name = f"{torch.cuda.get_device_name(0)} (this machine's; peak measured)"
        memory = torch.cuda.get_device_properties(0).total_memory
        peak = measured_peak_flops("cuda", torch.bfloat16 if bf16 else torch.float32)
    elif args.gpu is None and args.gpu_memory is not None and args.peak_flops is not None:
        name, memory, peak = "GPU", 0, 0.0
    else:
        kind = accelerator(args.gpu or "h100")
        name, memory, peak = kind.name, kind.memory, kind.peak_flops(bf16)
    if args.gpu_memory is not None:
        memory = round(args.gpu_memory * GIB)
    if args.peak_flops is not None:
        peak = args.peak_flops * 1e12
    flags = (("--gpu-memory", args.gpu_memory), ("--peak-flops", args.peak_flops))
    given = [flag for flag, value in flags if value is not None]
    if given and name != "GPU":
        name += f", with {' and '.join(given)}"
    return Hardware(name, gpus, memory, peak, mfu)


STRATEGY = {"single": "one GPU", "ddp": "DDP", "fsdp": "FSDP2"}


def gib(n: float) -> str:
    from fixedfirst.model.memory import GIB

    return f"{n / GIB:,.1f}"


def duration(seconds: float) -> str:
    """A predicted wall-clock: two significant digits of seconds (ms, µs) under a minute, then
    minutes, hours and days."""
    if seconds < 59.5:
        if seconds <= 0:
            return "0 s"
        seconds = float(f"{seconds:.2g}")  # two significant digits, then written out
        scale, unit = next(
            ((s, u) for s, u in ((1, "s"), (1e-3, "ms")) if seconds >= s), (1e-6, "µs")
        )
        value = seconds / scale
        return f"{value:.{max(0, 1 - math.floor(math.log10(value)))}f} {unit}"
    hours = seconds / 3600
    if hours < 1:
        return f"{seconds / 60:.0f} min"
    return f"{hours:,.1f} h" if hours < 48 else f"{hours / 24:,.1f} days"


def changes(option, configured) -> str:
    """What to set to train as `option` instead of as configured."""
    parts = []
    if option.strategy != configured.strategy:
        parts.append(f'train.strategy = "{option.strategy}"')
    if option.checkpoint != configured.checkpoint:
        parts.append(f"train.checkpoint_activations = {str(option.checkpoint).lower()}")
    if not option.fits:
        parts.append(f"train.micro_batch_size = {option.largest_micro_batch}")
    return ", ".join(parts)


def hardware_line(h) -> str:
    from fixedfirst.compute.memory import MARGIN

    return (
        f"{h.gpus} x {h.name}: {gib(h.memory)} GiB and {h.peak_flops / 1e12:,.0f} TFLOP/s peak "
        f"per GPU; a step fits in {gib(h.usable)} GiB ({1 - MARGIN:.0%})"
    )


def verdict(plan) -> list[str]:
    """What the configuration as given does, and what would fit if it does not."""
    c = plan.configured
    mine = f"{STRATEGY[c.strategy]}, checkpointing {'on' if c.checkpoint else 'off'}"
    head = f"as configured ({mine}, micro-batches of {plan.micro_batch}): "
    if c.fits:
        return [head + f"fits, peak {gib(c.memory.peak)} GiB per GPU"]
    lines = [head + f"does not fit, peak {gib(c.memory.peak)} GiB per GPU; what would:"]
    for o in plan.options:
        if o.largest_micro_batch is None:
            continue
        up_to = f" (up to micro-batches of {o.largest_micro_batch})" if o.fits else ""
        lines.append(f"  {changes(o, c)}{up_to}")
    if plan.gpus_needed is not None:
        lines.append(
            f"  nothing fits on {plan.hardware.gpus} GPU(s); FSDP2 with checkpointing and "
            f"micro-batches of 1 fits on {plan.gpus_needed} (--gpus {plan.gpus_needed})"
        )
    elif all(o.largest_micro_batch is None for o in plan.options):
        lines.append(
            "  nothing: not even one sequence at this depth fits with FSDP2 and checkpointing "
            "on any number of GPUs; shorten train.seq_len or the schedule's deepest depth"
        )
    return lines


def looped(config) -> bool:
    """Whether the run's model is a transformers looped architecture (the looped memory model's)."""
    from fixedfirst.config import TransformersModelConfig

    return isinstance(config.model, TransformersModelConfig)


def format_plan(plan, path: str) -> str:
    """The plan of one run: hardware, memory options, the verdict, FLOPs and wall-clock."""
    from fixedfirst.schedules import describe

    t, h = plan.config.train, plan.hardware
    local = t.batch_size // h.gpus
    precision = "fp32" if t.precision == "fp32" else "bf16"
    model = f" (transformers' {plan.config.model.architecture})" if looped(plan.config) else ""
    lines = [
        f"plan for {path}{model} on {hardware_line(h)}",
        f"schedule: {describe(plan.config.schedule)}; deepest training depth {plan.depth}",
        f"batch: {t.batch_size} x {t.seq_len} tokens per step, {local} per GPU in micro-batches "
        f"of {plan.micro_batch}; {precision}",
        "",
        *(looped_memory_lines(plan) if looped(plan.config) else memory_lines(plan)),
        "",
        *verdict(plan),
        "",
        *compute_lines(plan),
    ]
    return "\n".join(lines)


def memory_lines(plan) -> list[str]:
    """Our model's memory at the deepest depth under each strategy, checkpointing off and on."""
    lines = [
        f"memory per GPU at depth {plan.depth} (GiB; eager PyTorch, torch.compile not modeled):",
        "",
        "| strategy | checkpointing | parameters | gradients | AdamW | activations | peak "
        f"| fits at micro-batch {plan.micro_batch} | largest micro-batch that fits |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for o in plan.options:
        m = o.memory
        largest = "none" if o.largest_micro_batch is None else str(o.largest_micro_batch)
        lines.append(
            f"| {STRATEGY[o.strategy]} | {'on' if o.checkpoint else 'off'} | "
            f"{gib(m.parameters)} | {gib(m.gradients)} | {gib(m.optimizer)} | "
            f"{gib(m.activations)} | {gib(m.peak)} | {'yes' if o.fits else 'no'} | {largest} |"
        )
    return lines


LOOPED_MEMORY_SOURCE = (
    "compute/looped_memory.py: fitted on the CPU and checked there against measured peaks at "
    "two sizes the fit never saw, docs/figures/bench-looped-memory.md; no GPU has run this "
    "architecture"
)

SHAPE_FLOPS = (
    "compute/looped_flops.py: the weights' matmuls, a token's experts, eager attention, the "
    "head; at two small sizes 14-18% below torch's count with eager experts, 27-36% for "
    "low-rank, whose adapters' own work it leaves out"
)


def looped_memory_lines(plan) -> list[str]:
    """A transformers run's memory, as `--model-config` tabulates a finish: at each depth the
    schedule draws, as the run trains, checkpointing off and on."""
    from fixedfirst.machine.finish_plan import looped_rows
    from fixedfirst.machine.planning import run_shape

    t, h = plan.config.train, plan.hardware
    shape = run_shape(plan.config)
    if t.lowrank is None:
        training = f"full fine-tuning: all {shape.trained / 1e6:,.2f}M parameters trained"
    else:
        training = (
            f"low-rank adapters ([train.lowrank] rank {t.lowrank.rank}): "
            f"{shape.trained / 1e6:,.2f}M trained, the model's own weights frozen"
        )
    strategy = STRATEGY[plan.configured.strategy]
    where = strategy if h.gpus == 1 else f"{strategy} over {h.gpus} GPUs"
    return [
        f"{training}; {where}; memory per GPU (GiB) of one step at each depth the schedule "
        f"draws ({LOOPED_MEMORY_SOURCE})",
        "",
        *finish_table(looped_rows(plan)),
    ]


def finish_table(options) -> list[str]:
    """Memory per GPU and hours per billion tokens, a row per depth, training and checkpointing."""
    from fixedfirst.compute.memory import MARGIN

    lines = [
        "| depth | training | checkpointing | weights | gradients | AdamW | activations | peak "
        f"| fits in {1 - MARGIN:.0%} | hours per 1e9 tokens |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for o in options:
        m = o.memory
        lines.append(
            f"| {o.depth} | {'low-rank' if o.lowrank else 'full'} | "
            f"{'on' if o.checkpoint else 'off'} | {gib(m.parameters)} | {gib(m.gradients)} | "
            f"{gib(m.optimizer)} | {gib(m.activations)} | {gib(m.peak)} | "
            f"{'yes' if o.fits else 'no'} | {o.hours_per_billion:,.1f} |"
        )
    return lines


def compute_lines(plan) -> list[str]:
    """The run's FLOPs and its wall-clock, depth by depth at each depth's MFU."""
    h, b = plan.hardware, plan.run
    recompute = plan.recompute_flops / b.flops
    if looped(plan.config):
        counted = f"training FLOPs counted from the shape ({SHAPE_FLOPS})"
        again, assumed = "every layer's forward again", "; assumed for this architecture"
    else:
        counted = "modeled training FLOPs (`fixedfirst compute`)"
        again, assumed = "the core's forward again", ""
    lines = [
        f"compute: {b.tokens:.4g} tokens in {b.total_steps:,} steps, {b.flops:.4g} {counted}",
        f"wall-clock on {h.gpus} GPU(s), each depth at its MFU: {duration(plan.seconds(False))}; "
        f"with checkpointing (+{recompute:.0%} FLOPs, {again}): "
        f"{duration(plan.seconds(True))}",
        "",
        "| depth | steps | share of the FLOPs | MFU | wall-clock |",
        "| --- | --- | --- | --- | --- |",
    ]
    shares = plan.by_depth(plan.configured.checkpoint)
    total = sum(share.flops for share in shares)
    lines += [
        f"| {s.depth} | {s.steps:,.0f} | {s.flops / total:.1%} | {s.mfu:.3g} | "
        f"{duration(s.seconds)} |"
        for s in shares
    ]
    lines += ["", h.mfu.describe() + assumed]
    if looped(plan.config) and plan.config.train.flops is not None:
        lines.append(
            "train.flops: the steps above spend the budget as counted from the shape; `train` "
            "spends it as torch counts the model (`fixedfirst compute`), which counts more, so "
            "the run takes fewer steps"
        )
    return lines


def format_sweep(plans: dict, path: str) -> str:
    """One line per run of a sweep: its deepest depth, memory as configured, FLOPs, wall-clock."""
    first = next(iter(plans.values()))
    h = first.hardware
    lines = [
        f"plan for {path} ({len(plans)} runs) on {hardware_line(h)}",
        h.mfu.describe(),
        "",
        "| run | schedule | deepest K | peak GiB as configured | fits | modeled FLOPs "
        "| wall-clock |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    from fixedfirst.schedules import describe

    total = 0.0
    for name, plan in plans.items():
        c = plan.configured
        seconds = plan.seconds(c.checkpoint)
        total += seconds
        lines.append(
            f"| {name} | {describe(plan.config.schedule)} | {plan.depth} | {gib(c.memory.peak)} "
            f"| {'yes' if c.fits else 'no'} | {plan.run.flops:.3g} | {duration(seconds)} |"
        )
    lines += ["", f"all runs one after another: {duration(total)}"]
    runs_by_verdict: dict[tuple[str, ...], list[str]] = {}
    for name, plan in plans.items():
        if not plan.configured.fits:
            runs_by_verdict.setdefault(tuple(verdict(plan)), []).append(name)
    for said, names in runs_by_verdict.items():
        who = "every run" if len(names) == len(plans) else ", ".join(names)
        lines += [f"{who}: {said[0]}", *said[1:]]
    return "\n".join(lines)


def run_finish_plan(args: argparse.Namespace) -> int:
    from fixedfirst.cli.arguments import parse_depths
    from fixedfirst.config import LowRankConfig
    from fixedfirst.errors import UserError
    from fixedfirst.machine.finish_plan import model_options, plan_finish

    if args.overrides:
        raise UserError(
            "--set changes a run configuration; --model-config plans from config.json alone"
        )
    depths_text = FINISH_DEFAULTS[0] if args.depths is None else args.depths
    seq_len = FINISH_DEFAULTS[1] if args.seq_len is None else args.seq_len
    micro_batch = FINISH_DEFAULTS[2] if args.micro_batch is None else args.micro_batch
    for flag, value in (("--seq-len", seq_len), ("--micro-batch", micro_batch)):
        if value < 1:
            raise UserError(f"{flag} must be a positive whole number, got {value}")
    architecture, options = model_options(args.model_config)
    depths = parse_depths(depths_text)
    hardware = hardware_from_args(args, bf16=True, compiled=False)
    plan = plan_finish(
        architecture, options, hardware, seq_len, micro_batch, depths, LowRankConfig()
    )
    print(format_finish_plan(plan, args.model_config))
    return 0


def format_finish_plan(plan, path: str) -> str:
    """The plan's table, what it assumes, and what does not fit."""
    full, adapted = plan.shapes[False], plan.shapes[True]
    h = plan.hardware
    strategy = "FSDP2 over the GPUs" if h.gpus > 1 else "one GPU"
    lines = [
        f"finishing plan for {path} ({plan.architecture}) on {hardware_line(h)}",
        f"{full.parameters / 1e9:,.2f}B parameters; low-rank adapters (rank 16, the default "
        f"[train.lowrank] targets) {adapted.trained / 1e6:,.1f}M trained",
        f"{strategy}, bf16 autocast over fp32 weights, micro-batches of {plan.micro_batch} x "
        f"{plan.seq_len} tokens per GPU; memory per GPU (GiB) of one finishing step at each "
        f"depth ({LOOPED_MEMORY_SOURCE})",
        "",
        *finish_table(plan.options),
    ]
    lines += [
        "",
        h.mfu.describe() + "; assumed for this architecture, which no GPU has run",
        f"hours: FLOPs counted from the shape ({SHAPE_FLOPS})",
    ]
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
