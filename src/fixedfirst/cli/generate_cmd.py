"""`fixedfirst generate`: stream text from a run (or an export) at a fixed depth (the prompt at its
own depth, if asked), depth-speculated, or under a per-token exit rule, through a cache strategy;
several prompts decode as one padded batch. The model is fixedfirst's own looped transformer or a
transformers looped architecture (model/serving.py; the exit rules need ours). The flags become
one decoding mode (serve/decoding.py) here, and nowhere else.

The text goes to stdout, flushed after every token (with several prompts: each completion after
a header line once the batch is done); a summary line (tokens, depth or mean depth used,
speculation's acceptance, tokens/s) goes to stderr, so `fixedfirst generate ... > out.txt` keeps
only the text.
"""

from __future__ import annotations

import argparse
import sys
import time

from fixedfirst.cli.arguments import add_cache_argument, add_data_argument

DEFAULT_MAX_NEW_TOKENS = 200


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir", metavar="RUN", help="a run directory, or a directory written by export"
    )
    parser.add_argument(
        "--prompt",
        required=True,
        action="append",
        metavar="TEXT",
        help="the text to continue; repeat it to decode several prompts as one padded batch",
    )
    parser.add_argument(
        "--depth",
        "--decode-depth",
        type=int,
        metavar="K",
        help="serving depth: the loop passes of every generated token (default: the deepest "
        "depth the run trained at)",
    )
    parser.add_argument(
        "--prefill-depth",
        type=int,
        metavar="P",
        help="the loop passes of the prompt, prefilled in one step (default: the serving depth); "
        "the generated tokens then read the prompt's entries at their own depth",
    )
    parser.add_argument(
        "--cache-depth",
        type=int,
        metavar="C",
        help="build the cache for depths up to C (default: the deepest of --prefill-depth and "
        "the serving depth): one key/value entry per loop pass up to C per token",
    )
    parser.add_argument(
        "--speculate",
        metavar="DRAFT_DEPTH[:N]",
        help="depth-speculative greedy decoding: draft N tokens (default 4) at DRAFT_DEPTH, "
        "verify them at the serving depth; the same tokens as plain greedy decoding, faster",
    )
    parser.add_argument(
        "--exit",
        metavar="RULE",
        help="per-token adaptive depth: iterate until RULE says the token settled: kl, entropy "
        "(entropy change), state (relative change of the recurrent state), argmax (the same "
        "argmax for the last THRESHOLD iterations)",
    )
    parser.add_argument(
        "--threshold",
        type=float,
        metavar="T",
        help="--exit RULE's threshold (defaults: kl 1e-3, Huginn's; entropy 0.01 nats; state "
        "0.03; argmax 3 iterations)",
    )
    parser.add_argument(
        "--max-depth",
        type=int,
        metavar="K",
        help="--exit: never iterate more than K times (default: the deepest training depth)",
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
    add_cache_argument(parser)
    parser.add_argument("--checkpoint", type=int, metavar="STEP", help="default: the newest")
    add_data_argument(parser)
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.set_defaults(run=run)


def decoding_mode(args: argparse.Namespace, default_depth: int | None):
    """The one decoding mode the flags ask for, every flag checked in one line; None while it
    needs the run's default depth (`default_depth` None: the model is not loaded yet) and the
    flags do not give it. The mode's constructor refuses what depends on that depth."""
    from fixedfirst.errors import UserError
    from fixedfirst.model import check_depth, parse_cache_strategy
    from fixedfirst.serve.exit_rules import EXIT_RULES, exit_rule
    from fixedfirst.serve.generation import check_utf8
    from fixedfirst.serve.modes import (
        Adaptive,
        FixedDepth,
        Sampling,
        Speculated,
        check_speculation,
        parse_speculate,
    )

    if args.exit is None and (args.threshold is not None or args.max_depth is not None):
        raise UserError("--threshold and --max-depth go with --exit RULE")
    if args.exit is not None and args.depth is not None:
        raise UserError("give either --depth K (fixed depth) or --exit RULE, not both")
    if args.exit is not None and args.speculate is not None:
        raise UserError("give either --speculate (fixed depth, drafted) or --exit RULE, not both")
    for flag, given in (
        ("--prefill-depth", args.prefill_depth),
        ("--cache-depth", args.cache_depth),
    ):
        if given is not None and (args.exit is not None or args.speculate is not None):
            raise UserError(
                f"{flag} goes with a fixed serving depth (--depth); --exit and --speculate "
                "prefill the prompt at the depth they decode at and build their own cache"
            )
    if args.exit is not None and args.exit not in EXIT_RULES:
        raise UserError(
            f"--exit {args.exit!r}: unknown exit rule; choose one of {', '.join(EXIT_RULES)}"
        )
    depth_flags = (
        ("--depth", args.depth),
        ("--max-depth", args.max_depth),
        ("--prefill-depth", args.prefill_depth),
        ("--cache-depth", args.cache_depth),
    )
    for flag, given in depth_flags:
        if given is not None:
            check_depth(given, flag)
    if args.speculate is not None and args.temperature != 0:
        raise UserError(
            f"--speculate decodes greedily; it takes --temperature 0, got {args.temperature}"
        )
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise UserError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    for prompt in args.prompt:
        check_utf8(prompt)
    cache = parse_cache_strategy(args.cache)
    sampling = Sampling(args.temperature, args.seed)
    if args.exit is not None:
        max_depth = args.max_depth if args.max_depth is not None else default_depth
        rule = exit_rule(args.exit, args.threshold, max_depth or 1)
        return None if max_depth is None else Adaptive(rule, sampling, cache)
    depth = args.depth if args.depth is not None else default_depth
    if args.speculate is None:
        if depth is None:
            return None
        return FixedDepth(depth, sampling, cache, args.prefill_depth, args.cache_depth)
    draft_depth, draft_tokens = parse_speculate(args.speculate)
    try:
        if depth is None:  # the draft alone, until the serving depth is known
            check_speculation(draft_depth + 1, draft_depth, draft_tokens)
            return None
        return Speculated(depth, draft_depth, draft_tokens, cache)
    except UserError as e:
        raise UserError(f"--speculate {draft_depth}:{draft_tokens}: {e}") from None


def run(args: argparse.Namespace) -> int:
    from fixedfirst.machine.device import resolve_device
    from fixedfirst.runs.served import load_served
    from fixedfirst.serve.batching import generate_batch
    from fixedfirst.serve.generation import generate_text, room_after
    from fixedfirst.serve.speculative import SpeculationStats

    mode = decoding_mode(args, None)  # bad flags are refused before the model is loaded
    served = load_served(
        args.run_dir, args.checkpoint, resolve_device(args.device, "--device"), data=args.data
    )
    if mode is None:
        mode = decoding_mode(args, served.default_depth)
    max_new_tokens = args.max_new_tokens
    if max_new_tokens is None:
        room = min(room_after(served, p) for p in args.prompt)
        max_new_tokens = max(1, min(DEFAULT_MAX_NEW_TOKENS, room))
    stats = SpeculationStats()
    start = time.perf_counter()
    depths: list[int] = []
    if len(args.prompt) == 1:
        for step in generate_text(served, args.prompt[0], max_new_tokens, mode, stats):
            depths.append(step.depth)
            sys.stdout.write(step.text)
            sys.stdout.flush()
        sys.stdout.write("\n")
    else:
        completions = generate_batch(served, args.prompt, max_new_tokens, mode, stats)
        for number, done in enumerate(completions, 1):
            sys.stdout.write(f"--- {number}: {done.prompt!r}\n{done.text}\n")
            depths.extend(done.depths)
    seconds = time.perf_counter() - start
    sys.stdout.flush()
    line = summary(args, depths, seconds, mode, stats)
    print(f"[{served.description}: {line}]", file=sys.stderr)
    return 0


def summary(args, depths: list[int], seconds: float, mode, stats) -> str:
    """Tokens, what served them, and how fast: the stderr line after the text."""
    from fixedfirst.serve.modes import Adaptive, Speculated

    parts = [f"{len(depths)} token{'' if len(depths) == 1 else 's'}"]
    if len(args.prompt) > 1:
        parts[0] += f" from {len(args.prompt)} prompts in one batch"
    if isinstance(mode, Adaptive):
        mean = sum(depths) / len(depths) if depths else float("nan")
        spread = f", min {min(depths)}, max {max(depths)}" if depths else ""
        parts.append(f"{mode.describe()}: mean depth {mean:.2f}{spread}")
    else:
        parts.append(mode.describe())
    if isinstance(mode, Speculated) and stats.rounds:
        parts[-1] += (
            f": {stats.acceptance_rate:.0%} accepted "
            f"({stats.agreed} of {stats.drafted} in {stats.rounds} rounds)"
        )
    parts.append(mode.cache_strategy.describe())
    if seconds > 0:
        parts.append(f"{len(depths) / seconds:,.1f} tokens/s")
    return ", ".join(parts)
