"""`fixedfirst ablation`: which architecture switches make fixed-depth training collapse off
its training depth."""

from __future__ import annotations

import argparse
from pathlib import Path

from fixedfirst.cli.studies import add_study_arguments, print_conducted


def _ints(text: str) -> list[int]:
    from fixedfirst.errors import UserError

    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise UserError(f"--seeds {text!r}: expected comma-separated integers, e.g. 0,1") from None


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", required=True, help="bios or chains: whose preset and metric")
    parser.add_argument("--depth", type=int, default=4, help="the fixed training depth K (4)")
    parser.add_argument("--seeds", default="0", help="training seeds, e.g. 0,1 (default 0)")
    add_study_arguments(parser, "scoring them", "the task's preset (default)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fixedfirst.studies.ablation.experiment import load_ablation
    from fixedfirst.studies.ablation.report import findings
    from fixedfirst.studies.kit.conduct import conduct

    study = load_ablation(args.task, args.preset, args.overrides, args.depth, _ints(args.seeds))
    conducted = conduct(study, Path(args.out), args.quiet, args.jobs)
    if not args.quiet:
        print_conducted(conducted, findings(conducted.results))
    return 0
