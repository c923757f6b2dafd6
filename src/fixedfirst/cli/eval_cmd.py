"""`fixedfirst eval`: a run's checkpoint at many serving depths: validation NLL, or bios recall."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fixedfirst.cli.arguments import parse_depths

DEFAULT_DEPTHS = "1..16,32,64"


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN", help="a run directory written by train")
    parser.add_argument("--checkpoint", type=int, metavar="STEP", help="default: the newest")
    parser.add_argument("--depths", default=DEFAULT_DEPTHS, help=f"default {DEFAULT_DEPTHS}")
    parser.add_argument("--batches", type=int, help="validation batches (default: eval.batches)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument(
        "--out", metavar="FILE", help="JSON output (default RUN/eval[-bios]-step-STEP.json)"
    )
    parser.add_argument(
        "--task",
        choices=["nll", "bios"],
        default="nll",
        help="nll: validation NLL (default); bios: recalled bits per person of a bios run",
    )
    parser.add_argument("--people", type=int, help="bios: people scored (default all)")
    parser.set_defaults(run=run)


def bios_recall(args: argparse.Namespace, loaded, depths: list[int]) -> dict:
    """Recalled bits per person of a bios run at each depth, printed as a table."""
    from fixedfirst.errors import UserError
    from fixedfirst.tasks.bios.recall import evaluate_recall
    from fixedfirst.tasks.bios.world import build_world

    if loaded.config.data.kind != "bios":
        raise UserError(
            f"--task bios needs a run trained on [data] kind = 'bios'; {args.run_dir} trained "
            f"on {loaded.config.data.kind!r} (use --task nll)"
        )
    if args.people is not None and args.people < 1:
        raise UserError(f"--people must be >= 1, got {args.people}")
    world = build_world(loaded.config.data)
    report = evaluate_recall(loaded.model, world, depths, people=args.people)
    print(
        f"{args.run_dir} step {loaded.checkpoint.step}: recalled bits per person "
        f"({report.people} people, ceiling {report.ceiling_bits:.2f})"
    )
    print("| depth | bits |\n| --- | --- |")
    for depth, bits in report.bits().items():
        print(f"| {depth} | {bits:.2f} |")
    return {"task": "bios", **report.to_dict()}


def run(args: argparse.Namespace) -> int:
    from fixedfirst.data.source import build_source
    from fixedfirst.errors import UserError
    from fixedfirst.hardware import resolve_device, resolve_dtype
    from fixedfirst.run import load_run
    from fixedfirst.train.evaluation import mean_serving_nll, validation_nll

    depths = parse_depths(args.depths)
    if args.batches is not None and args.batches < 1:
        raise UserError(f"--batches must be >= 1, got {args.batches}")
    device = resolve_device(args.device)
    loaded = load_run(args.run_dir, args.checkpoint, device)
    step = loaded.checkpoint.step
    name = f"eval-step-{step:07d}.json" if args.task == "nll" else f"eval-bios-step-{step:07d}.json"
    out = Path(args.out) if args.out else Path(args.run_dir) / name
    if args.task == "bios":
        result = {"run": str(args.run_dir), "step": step, **bios_recall(args, loaded, depths)}
        out.write_text(json.dumps(result, indent=2))
        print(f"wrote {out}")
        return 0
    config = loaded.config
    source = build_source(config)
    data_state = loaded.checkpoint.meta.get("data")
    if data_state is not None:  # refuses other data than the run trained on (another tokenizer)
        source.load_state_dict(data_state)
    batches = source.validation_batches(
        args.batches or config.eval.batches, config.train.micro_batch
    )
    dtype = resolve_dtype(config.train.precision, device)
    nll = validation_nll(loaded.model, batches, depths, device, dtype)
    mean = mean_serving_nll(nll)
    result = {
        "run": str(args.run_dir),
        "step": step,
        "tokens": loaded.checkpoint.meta.get("tokens"),
        "nll_by_depth": {str(d): v for d, v in nll.items()},
        "mean_serving_nll": mean,
    }
    print(f"{args.run_dir} step {step}: validation NLL (nats/token)")
    print("| depth | NLL |\n| --- | --- |")
    for d, v in nll.items():
        print(f"| {d} | {v:.4f} |")
    if mean is not None:
        print(f"mean serving NLL (depths 1..16): {mean:.4f}")
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")
    return 0
