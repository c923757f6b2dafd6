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


def bios_recall(args: argparse.Namespace, depths: list[int], device) -> dict:
    """Recalled bits per person of a bios run at each depth, printed as a table."""
    from fixedfirst.errors import UserError
    from fixedfirst.run import load_run
    from fixedfirst.tasks.bios.recall import evaluate_recall
    from fixedfirst.tasks.bios.world import build_world

    if args.people is not None and args.people < 1:
        raise UserError(f"--people must be >= 1, got {args.people}")
    loaded = load_run(args.run_dir, args.checkpoint, device)
    if loaded.config.data.kind != "bios":
        raise UserError(
            f"--task bios needs a run trained on [data] kind = 'bios'; {args.run_dir} trained "
            f"on {loaded.config.data.kind!r} (use --task nll)"
        )
    report = evaluate_recall(
        loaded.model, build_world(loaded.config.data), depths, people=args.people
    )
    step = loaded.checkpoint.step
    print(
        f"{args.run_dir} step {step}: recalled bits per person "
        f"({report.people} people, ceiling {report.ceiling_bits:.2f})"
    )
    print("| depth | bits |\n| --- | --- |")
    for depth, bits in report.bits().items():
        print(f"| {depth} | {bits:.2f} |")
    return {"task": "bios", "run": str(args.run_dir), "step": step, **report.to_dict()}


def run(args: argparse.Namespace) -> int:
    from fixedfirst.errors import UserError
    from fixedfirst.hardware import resolve_device
    from fixedfirst.run_eval import eval_path, evaluate_run, write_eval

    depths = parse_depths(args.depths)
    if args.batches is not None and args.batches < 1:
        raise UserError(f"--batches must be >= 1, got {args.batches}")
    out = Path(args.out) if args.out else None
    if out is not None and not out.parent.is_dir():
        raise UserError(f"--out {out}: directory {out.parent} does not exist")
    device = resolve_device(args.device)
    if args.task == "bios":
        result = bios_recall(args, depths, device)
        out = out or Path(args.run_dir) / f"eval-bios-step-{result['step']:07d}.json"
        out.write_text(json.dumps(result, indent=2))
        print(f"wrote {out}")
        return 0
    result = evaluate_run(args.run_dir, depths, args.batches, args.checkpoint, device)
    print(
        f"{args.run_dir} step {result['step']}: validation NLL (nats/token) over "
        f"{result['scored_tokens']:,} tokens; {result['schedule']}"
    )
    print("| depth | NLL |\n| --- | --- |")
    for d, v in result["nll_by_depth"].items():
        print(f"| {d} | {v:.4f} |")
    if result["mean_serving_nll"] is not None:
        print(f"mean serving NLL (depths 1..16): {result['mean_serving_nll']:.4f}")
    out = out or eval_path(args.run_dir, result["step"])
    write_eval(result, out)
    print(f"wrote {out}")
    return 0
