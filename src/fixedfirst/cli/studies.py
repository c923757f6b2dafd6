"""What the study commands (bios, chains, ablation, sweep, moe, finishing) share: their flags, and
how they say what they did."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from fixedfirst.cli.arguments import add_set_argument

if TYPE_CHECKING:
    from fixedfirst.studies.kit.conduct import Conducted
    from fixedfirst.studies.kit.presets import PresetStudy


def add_study_arguments(
    parser: argparse.ArgumentParser, evaluations: str, presets: str | None = None
) -> None:
    """--preset and --set (when the study is made from a preset, `presets` its help), --out,
    --jobs (`evaluations`: what the workers do besides training) and --quiet."""
    if presets is not None:
        parser.add_argument("--preset", default="default", help=presets)
    parser.add_argument("--out", required=True, metavar="DIR", help="the study's directory")
    if presets is not None:
        add_set_argument(parser)
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help=f"worker processes training the runs and {evaluations} side by side (default: one "
        "per free core on a CPU, up to the runs left to train; 1 on a GPU)",
    )
    parser.add_argument("--quiet", action="store_true", help="print nothing but errors")


def print_conducted(
    conducted: Conducted, findings: list[str], missing: list[str] | None = None
) -> None:
    """The study's findings, what it trained and reused, the runs it reports (and those of
    `missing`, not finished) and every file it wrote."""
    for sentence in findings:
        print(f"- {sentence}")
    reported = len(conducted.results["runs"])
    print(
        f"trained {len(conducted.trained)} run(s), reused {len(conducted.reused)}; "
        f"{reported} in the table" + (f"; not finished: {', '.join(missing)}" if missing else "")
    )
    for path in conducted.files:
        print(f"wrote {path}")


def conduct_depth_arms(
    load_preset: Callable[[str, list[str]], PresetStudy], args: argparse.Namespace
) -> int:
    """Run a study whose analysis is studies/kit/depth_arms.py's (moe, finishing) and print its
    primary comparisons' verdicts."""
    from fixedfirst.studies.kit.conduct import conduct
    from fixedfirst.studies.kit.depth_tables import points

    study = load_preset(args.preset, args.overrides)
    conducted = conduct(study, Path(args.out), args.quiet, args.jobs)
    if not args.quiet:
        primary = conducted.results["analysis"]["primary"]
        if "nll" in conducted.results["analysis"]:  # on text: held-out NLL, not accuracy
            from fixedfirst.studies.finishing.nll_report import nats

            findings = [
                f"primary: {p['name']}: {nats(p['difference'])} nats/token, {p['verdict']}"
                for p in primary
            ]
        else:
            findings = [
                f"primary: {p['name']}: {points(p['difference'])} points, {p['verdict']}"
                for p in primary
            ]
        print_conducted(conducted, findings)
    return 0
