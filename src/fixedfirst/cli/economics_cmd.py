"""`fixedfirst serving-economics`: the exit frontier of every run of the configured studies and
the comparison across schedules: compute saved at matched quality by schedule, the paired
differences named in the config, and which exit rule is best for which schedule."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "config",
        metavar="CONFIG.toml",
        help="the study's configuration (e.g. configs/serving-economics.toml)",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="the study's directory")
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="worker processes measuring the runs' frontiers side by side (default 1: one by one, "
        "so that each frontier's tokens/s has the machine to itself)",
    )
    parser.add_argument("--quiet", action="store_true", help="print nothing but errors")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fixedfirst.studies.kit.conduct import conduct
    from fixedfirst.studies.serving.runner import EconomicsStudy
    from fixedfirst.studies.serving.settings import load_economics

    config = load_economics(args.config)  # refused before anything is read
    out = Path(args.out)
    conducted = conduct(EconomicsStudy(config, out, args.jobs), out, args.quiet, args.jobs)
    if not args.quiet:
        for path in conducted.files:
            print(f"wrote {path}")
    return 0
