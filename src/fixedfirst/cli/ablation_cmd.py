"""`fixedfirst ablation`: which architecture switches make fixed-depth training collapse off
its training depth."""

from __future__ import annotations

import argparse
from pathlib import Path

from fixedfirst.cli.arguments import add_set_argument


def _ints(text: str) -> list[int]:
    from fixedfirst.errors import UserError

    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise UserError(f"--seeds {text!r}: expected comma-separated integers, e.g. 0,1") from None


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", required=True, help="bios or chains: whose preset and metric")
    parser.add_argument("--preset", default="default", help="the task's preset (default)")
    parser.add_argument("--depth", type=int, default=4, help="the fixed training depth K (4)")
    parser.add_argument("--seeds", default="0", help="training seeds, e.g. 0,1 (default 0)")
    parser.add_argument("--out", required=True, metavar="DIR", help="experiment directory")
    add_set_argument(parser)
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="worker processes training the runs and scoring them side by side (default: one "
        "per free core on a CPU, up to the runs left to train; 1 on a GPU)",
    )
    parser.add_argument("--quiet", action="store_true", help="print nothing but errors")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fixedfirst.studies.ablation.experiment import load_ablation, run_ablation
    from fixedfirst.studies.ablation.report import findings

    ablation = load_ablation(args.task, args.preset, args.overrides, args.depth, _ints(args.seeds))
    out = Path(args.out)
    results = run_ablation(ablation, out, quiet=args.quiet, jobs=args.jobs)
    if not args.quiet:
        for sentence in findings(results):
            print(f"- {sentence}")
        print(f"wrote {out / 'results.json'}, {out / 'report.json'}, {out / 'report.md'}")
    return 0
