"""`fixedfirst frontier`: one model's exit frontier: quality against recurrent iterations per
token for fixed depths and each exit rule over its thresholds, with decoding speed, the Pareto
front and the compute saved at matched quality (docs/guides/serving.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from fixedfirst.cli.arguments import add_data_argument, parse_depths
from fixedfirst.files import locks

FILES = ("frontier.json", "frontier.md", "frontier.png")


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir", metavar="RUN", help="a run directory (or an export, with --data)"
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="where frontier.json, frontier.md and frontier.png go (default RUN/frontier)",
    )
    parser.add_argument(
        "--max-depth",
        type=int,
        metavar="K",
        help="the deepest serving depth (default: the deepest depth the run trained at)",
    )
    parser.add_argument("--depths", help="the fixed depths (default 1..K)")
    parser.add_argument(
        "--exit",
        dest="exits",
        action="append",
        metavar="RULE=T1,T2,...",
        help="an exit rule (kl, entropy, state, argmax) and the thresholds to sweep it over "
        "(repeatable; default: all four rules over their default sweeps)",
    )
    parser.add_argument("--rows", type=int, default=64, help="held-out rows of a text run")
    parser.add_argument(
        "--sequences", type=int, default=256, help="evaluation sequences of a chains run"
    )
    parser.add_argument("--seed", type=int, default=0, help="the held-out draw's seed")
    parser.add_argument(
        "--speed-rows", type=int, default=8, help="prompts decoded as one batch for tokens/s"
    )
    parser.add_argument("--speed-tokens", type=int, default=32, help="greedy tokens per prompt")
    parser.add_argument(
        "--repeats", type=int, default=3, help="rounds timing every point (the median kept)"
    )
    add_data_argument(parser)
    parser.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--quiet", action="store_true", help="no progress display")
    parser.set_defaults(run=run)


def parse_exit(text: str) -> tuple[str, list[float]]:
    """'kl=0.01,0.001' -> ('kl', [0.01, 0.001]), refused in one line when malformed, for an
    unknown rule or a threshold the rule does not take (negative; argmax below 2)."""
    from fixedfirst.errors import UserError
    from fixedfirst.serve.exit_rules import exit_rule

    name, sign, listed = text.partition("=")
    try:
        if not sign:
            raise ValueError
        thresholds = [float(t) for t in listed.split(",")] if listed.strip() else []
    except ValueError:
        raise UserError(
            f"--exit {text!r}: expected RULE=T1,T2,... (thresholds as numbers), e.g. kl=0.01,0.001"
        ) from None
    if not thresholds:
        raise UserError(f"--exit {text!r}: the threshold list is empty; give at least one")
    name = name.strip()
    for threshold in thresholds:
        try:
            exit_rule(name, threshold)
        except UserError as e:
            raise UserError(f"--exit {text}: {e}") from None
    return name, thresholds


def settings_from(args: argparse.Namespace):
    from fixedfirst.errors import UserError
    from fixedfirst.studies.serving.frontier import FrontierSettings

    exits = None
    if args.exits:
        exits = {}
        for text in args.exits:
            name, thresholds = parse_exit(text)
            if name in exits:
                raise UserError(f"--exit {name} is given twice; list its thresholds once")
            exits[name] = thresholds
    values = {
        "max_depth": args.max_depth,
        "depths": parse_depths(args.depths) if args.depths else None,
        "rows": args.rows,
        "sequences": args.sequences,
        "seed": args.seed,
        "speed_rows": args.speed_rows,
        "speed_tokens": args.speed_tokens,
        "speed_repeats": args.repeats,
    }
    if exits is not None:
        values["exits"] = exits
    return FrontierSettings(**values)


def check_outputs(out: Path) -> None:
    """Refuse an --out that is a file, or that holds a frontier.json or frontier.png that
    fixedfirst did not write."""
    from fixedfirst.errors import UserError
    from fixedfirst.files.paths import shown
    from fixedfirst.files.writing import is_our_figure, is_our_json

    if out.exists() and not out.is_dir():
        raise UserError(f"--out {shown(out)} exists and is not a directory")
    for name, ours in (("frontier.json", is_our_json), ("frontier.png", is_our_figure)):
        if (out / name).exists() and not ours(out / name):
            raise UserError(
                f"--out {shown(out)}: {name} there was not written by fixedfirst; nothing was "
                "written (choose another directory)"
            )


def run(args: argparse.Namespace) -> int:
    from fixedfirst.errors import UserError

    settings = settings_from(args)  # refused before anything is loaded
    run_dir = Path(args.run_dir)
    if not run_dir.exists():
        raise UserError(f"{args.run_dir}: no such run directory or export")
    out = Path(args.out) if args.out else run_dir / "frontier"
    check_outputs(out)
    if args.out is not None or not run_dir.is_dir():
        return measure(args, settings, out)
    with locks.holding(run_dir, "frontier", hint="give --out DIR to write the frontier elsewhere"):
        return measure(args, settings, out)


def measure(args: argparse.Namespace, settings, out: Path) -> int:
    from fixedfirst.files.writing import write_text_atomic
    from fixedfirst.machine.device import resolve_device
    from fixedfirst.studies.kit.report_files import numbers_json
    from fixedfirst.studies.serving.frontier import measure_frontier, open_subject
    from fixedfirst.studies.serving.frontier_figure import plot_frontier
    from fixedfirst.studies.serving.frontier_report import frontier_markdown, short

    subject = open_subject(args.run_dir, settings, args.data, resolve_device(args.device))
    document = measure_frontier(subject, settings, args.quiet)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / FILES[0], numbers_json(document) + "\n")
    write_text_atomic(out / FILES[1], frontier_markdown(document))
    plot_frontier(document, out / FILES[2])
    points, matched = document["points"], document["matched"]
    best, m = points[matched["best_fixed"]], matched["by"]["iterations"]
    quality = document["quality"]["name"]
    print(
        f"{args.run_dir} step {document['step']}: best fixed depth {best['serving']} "
        f"({quality} {best['quality']:.4g}); at matched quality the least recurrent compute is "
        f"{short(points[m['point']])} at {points[m['point']]['mean_depth']:.2f} iterations per "
        f"token: {m['saved']:.1%} saved, {m['saved_by_exit']:.1%} beyond the cheapest matching "
        f"fixed depth ({points[m['cheapest_fixed']]['serving']})"
    )
    for name in FILES:
        print(f"wrote {out / name}")
    return 0
