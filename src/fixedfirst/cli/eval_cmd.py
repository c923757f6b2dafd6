"""`fixedfirst eval`: validation NLL of a run's checkpoint at many serving depths."""

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
    parser.add_argument("--out", metavar="FILE", help="JSON output (default RUN/eval-STEP.json)")
    parser.set_defaults(run=run)


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
    step = loaded.checkpoint.step
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
    out = Path(args.out) if args.out else Path(args.run_dir) / f"eval-step-{step:07d}.json"
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")
    return 0
