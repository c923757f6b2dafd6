"""`fixedfirst finishing`: finishing stages of every length and rate for runs trained at one
depth, scored by depth."""

from __future__ import annotations

import argparse
from pathlib import Path

from fixedfirst.cli.studies import add_study_arguments, print_conducted


def register(parser: argparse.ArgumentParser) -> None:
    presets = (
        "dense (our chains model at K = 4), moe (the looped mixture-of-experts at 2 passes), "
        "smoke (seconds), or a preset .toml"
    )
    add_study_arguments(parser, "their finishing stages", presets)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fixedfirst.studies.depth_tables import points
    from fixedfirst.studies.finishing.experiment import load_preset
    from fixedfirst.studies.side_by_side import conduct

    study = load_preset(args.preset, args.overrides)
    conducted = conduct(study, Path(args.out), args.quiet, args.jobs)
    if not args.quiet:
        primary = conducted.results["analysis"]["primary"]
        findings = [
            f"primary: {p['name']}: {points(p['difference'])} points, {p['verdict']}"
            for p in primary
        ]
        print_conducted(conducted, findings)
    return 0
