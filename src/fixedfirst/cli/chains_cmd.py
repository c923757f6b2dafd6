"""`fixedfirst chains`: every schedule on a task where serving depth decides the answer."""

from __future__ import annotations

import argparse
from pathlib import Path

from fixedfirst.cli.studies import add_study_arguments, print_conducted


def register(parser: argparse.ArgumentParser) -> None:
    presets = "default (5 schedules x 5 seeds), smoke (under 2 minutes), or a preset .toml"
    add_study_arguments(parser, "scoring them", presets)
    parser.add_argument(
        "--compare",
        metavar="OLD_DIR",
        help="an earlier run of the same preset: write DIR/rerun.md, what this run moved and "
        "which verdicts kept their side",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fixedfirst.files.writing import write_text_atomic
    from fixedfirst.studies.chains.experiment import load_preset
    from fixedfirst.studies.chains.report import findings, primary_findings
    from fixedfirst.studies.chains.rerun import compare, rerun_markdown
    from fixedfirst.studies.kit.conduct import conduct

    study = load_preset(args.preset, args.overrides)
    out = Path(args.out)
    old = read_results(Path(args.compare)) if args.compare else None
    conducted = conduct(study, out, args.quiet, args.jobs)
    results = conducted.results
    if not args.quiet:
        primary = [f"primary: {s}" for s in primary_findings(results)]
        print_conducted(conducted, [*primary, *findings(results)])
    if old is not None:
        comparison = compare(old, results)
        write_text_atomic(out / "rerun.md", rerun_markdown(comparison, args.compare, str(out)))
        if not args.quiet:
            kept = sum(v["kept"] for v in comparison["verdicts"])
            print(
                f"{kept} of {len(comparison['verdicts'])} verdicts kept; wrote {out / 'rerun.md'}"
            )
    return 0


def read_results(directory: Path) -> dict:
    """A finished chains experiment's results.json, or a one-line error."""
    import json

    from fixedfirst.errors import UserError

    path = directory / "results.json"
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"--compare {directory}: cannot read {path} ({e})") from None
    if results.get("format") != "fixedfirst-chains-results" or results.get("version") != 2:
        raise UserError(
            f"--compare {directory}: {path} is not the results of this version's chains "
            "experiment; run `fixedfirst chains --out` there again first"
        )
    return results
