"""`fixedfirst train`: train one run into a run directory (or resume it)."""

from __future__ import annotations

import argparse

from fixedfirst.cli.arguments import add_set_argument
from fixedfirst.config import load_config


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "config",
        nargs="?",
        metavar="CONFIG.toml",
        help="run configuration; with --resume it defaults to RUN/config.toml",
    )
    parser.add_argument("--out", required=True, metavar="RUN", help="the run directory")
    add_set_argument(parser)
    parser.add_argument(
        "--resume", action="store_true", help="continue from the latest complete checkpoint"
    )
    parser.add_argument(
        "--stop-after",
        type=int,
        metavar="STEPS",
        help="pause (checkpointed) once this many steps are done; continue later with --resume",
    )
    parser.add_argument("--quiet", action="store_true", help="print nothing but errors")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fixedfirst.errors import UserError
    from fixedfirst.train.run_dir import RunDir
    from fixedfirst.train.trainer import Trainer, format_summary

    if args.config is None:
        if not args.resume:
            raise UserError("give a CONFIG.toml (or --resume to continue RUN/config.toml)")
        config_path = RunDir(args.out).config_path
        if not config_path.is_file():
            raise UserError(f"--resume: {args.out} holds no run (no config.toml)")
        config = load_config(config_path, args.overrides)
    else:
        config = load_config(args.config, args.overrides)
    trainer = Trainer(config, args.out, resume=args.resume, quiet=args.quiet)
    if args.stop_after is not None and args.stop_after < 1:
        raise UserError(f"--stop-after must be >= 1, got {args.stop_after}")
    summary = trainer.train(stop_after=args.stop_after)
    if not args.quiet:
        print(format_summary(summary))
    return 0
