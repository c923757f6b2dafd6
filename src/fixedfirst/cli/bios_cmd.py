"""`fixedfirst bios`: the synthetic recall experiment behind Figure 1."""

from __future__ import annotations

import argparse
from pathlib import Path

from fixedfirst.cli.arguments import add_set_argument


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--preset",
        default="default",
        help="default (about 4 minutes on 2 CPU cores), smoke (under a minute), "
        "or a path to a preset .toml",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="experiment directory")
    add_set_argument(parser)
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="worker processes training the runs and measuring recall side by side (default: "
        "one per free core on a CPU, up to the 3 runs; 1 on a GPU)",
    )
    parser.add_argument("--quiet", action="store_true", help="print nothing but errors")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fixedfirst.studies.bios.experiment import load_preset, run_experiment
    from fixedfirst.studies.bios.report import findings, primary_findings

    preset = load_preset(args.preset, args.overrides)
    out = Path(args.out)
    results = run_experiment(preset, out, quiet=args.quiet, jobs=args.jobs)
    if not args.quiet:
        for sentence in primary_findings(results):
            print(f"- primary: {sentence}")
        for sentence in findings(results):
            print(f"- {sentence}")
        names = ("results.json", "figure1.png", "report.json", "report.md")
        print("wrote " + ", ".join(str(out / n) for n in names))
    return 0
