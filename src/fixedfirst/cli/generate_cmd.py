"""`fixedfirst generate`: stream text from a run (or an export) at a fixed depth or with KL exit.

The text goes to stdout, flushed after every token; a summary line (tokens, depth or mean depth
used, tokens/s) goes to stderr, so `fixedfirst generate ... > out.txt` keeps only the text.
"""

from __future__ import annotations

import argparse
import sys
import time

DEFAULT_MAX_NEW_TOKENS = 200


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir", metavar="RUN", help="a run directory, or a directory written by export"
    )
    parser.add_argument("--prompt", required=True, metavar="TEXT", help="the text to continue")
    parser.add_argument(
        "--depth",
        type=int,
        metavar="K",
        help="serving depth (default: the deepest depth the run trained at)",
    )
    parser.add_argument(
        "--exit",
        choices=["kl"],
        help="per-token adaptive depth: iterate until the next-token distribution settles",
    )
    parser.add_argument(
        "--threshold",
        type=float,
        metavar="T",
        help="--exit kl: stop when KL(previous || current) < T (default 1e-3, Huginn's)",
    )
    parser.add_argument(
        "--max-depth",
        type=int,
        metavar="K",
        help="--exit kl: never iterate more than K times (default: the deepest training depth)",
    )
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        metavar="N",
        help=f"default: as many as fit the model's window after the prompt, at most "
        f"{DEFAULT_MAX_NEW_TOKENS}",
    )
    parser.add_argument(
        "--temperature", type=float, default=0.0, help="0 (default) is greedy; > 0 samples"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampling (default 0)")
    parser.add_argument("--checkpoint", type=int, metavar="STEP", help="default: the newest")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fixedfirst.errors import UserError
    from fixedfirst.hardware import resolve_device
    from fixedfirst.model import check_depth
    from fixedfirst.serve.adaptive import DEFAULT_THRESHOLD, KLExit
    from fixedfirst.serve.generation import (
        check_sampling,
        check_utf8,
        generate_text,
        room_after,
    )
    from fixedfirst.serve.loading import load_served

    if args.exit is None and (args.threshold is not None or args.max_depth is not None):
        raise UserError("--threshold and --max-depth go with --exit kl")
    if args.exit is not None and args.depth is not None:
        raise UserError("give either --depth K (fixed depth) or --exit kl, not both")
    for given in (args.depth, args.max_depth):
        if given is not None:
            check_depth(given)
    threshold = DEFAULT_THRESHOLD if args.threshold is None else args.threshold
    KLExit(threshold)  # a bad threshold is refused before the model is loaded
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise UserError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    check_sampling(args.temperature, args.seed)
    check_utf8(args.prompt)
    served = load_served(args.run_dir, args.checkpoint, resolve_device(args.device))
    depth = rule = None
    if args.exit == "kl":
        max_depth = served.default_depth if args.max_depth is None else args.max_depth
        rule = KLExit(threshold, max_depth)
    else:
        depth = served.default_depth if args.depth is None else args.depth
    max_new_tokens = args.max_new_tokens
    if max_new_tokens is None:
        max_new_tokens = max(1, min(DEFAULT_MAX_NEW_TOKENS, room_after(served, args.prompt)))
    start = time.perf_counter()
    depths: list[int] = []
    for step in generate_text(
        served, args.prompt, max_new_tokens, depth, rule, args.temperature, args.seed
    ):
        depths.append(step.depth)
        sys.stdout.write(step.text)
        sys.stdout.flush()
    seconds = time.perf_counter() - start
    sys.stdout.write("\n")
    sys.stdout.flush()
    rate = f"{len(depths) / seconds:,.1f} tokens/s" if seconds > 0 else ""
    if rule is not None:
        mean = sum(depths) / len(depths) if depths else float("nan")
        spread = f", min {min(depths)}, max {max(depths)}" if depths else ""
        used = f"{rule.describe()}: mean depth {mean:.2f}{spread}"
    else:
        used = f"depth {depth}"
    count = f"{len(depths)} token{'' if len(depths) == 1 else 's'}"
    print(f"[{served.description}: {count}, {used}, {rate}]", file=sys.stderr)
    return 0
