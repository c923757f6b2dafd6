"""`fixedfirst eval`: validation NLL of a run's checkpoint at many serving depths."""

from __future__ import annotations

import argparse
from pathlib import Path

from fixedfirst.cli.arguments import parse_depths

DEFAULT_DEPTHS = "1..16,32,64"


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN", help="a run directory written by train")
    parser.add_argument("--checkpoint", type=int, metavar="STEP", help="default: the newest")
    parser.add_argument("--depths", default=DEFAULT_DEPTHS, help=f"default {DEFAULT_DEPTHS}")
    parser.add_argument("--batches", type=int, help="validation batches (default: eval.batches)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--out", metavar="FILE", help="JSON output (default RUN/eval-STEP.json)")
    parser.set_defaults(run=run)


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
