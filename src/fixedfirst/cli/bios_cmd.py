"""`fixedfirst bios`: the synthetic recall experiment behind Figure 1."""

from __future__ import annotations

import argparse
from pathlib import Path

from fixedfirst.cli.studies import add_study_arguments, print_conducted


def register(parser: argparse.ArgumentParser) -> None:
    presets = (
        "default (about 4 minutes on 2 CPU cores), smoke (under a minute), "
        "or a path to a preset .toml"
    )
    add_study_arguments(parser, "measuring recall", presets)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fixedfirst.studies.bios.experiment import load_preset
    from fixedfirst.studies.bios.report import findings, primary_findings
    from fixedfirst.studies.kit.conduct import conduct

    study = load_preset(args.preset, args.overrides)
    conducted = conduct(study, Path(args.out), args.quiet, args.jobs)
    if not args.quiet:
        primary = [f"primary: {s}" for s in primary_findings(conducted.results)]
        print_conducted(conducted, [*primary, *findings(conducted.results)])
    return 0
