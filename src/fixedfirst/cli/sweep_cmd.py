"""`fixedfirst sweep`: train a list of runs, evaluate them at every serving depth, tabulate."""

from __future__ import annotations

import argparse

from fixedfirst.cli.studies import add_study_arguments, print_conducted

EPILOG = """\
writes:
  DIR/runs/NAME/         one run directory per run (with its eval-step-N.json)
  DIR/table.md           schedule, tokens, modeled FLOPs and savings, wall-clock and its savings,
                         mean serving NLL (1..16) and its difference to the reference, NLL at
                         K = 1, 4, 16, 32, 64
                         with [sweep] seeds, a second table: each [[runs]] entry's mean and 95%
                         interval over seeds and its paired difference to the reference
  DIR/results.json       the same and more, for every finished run
  DIR/claims.md          each [[claims]] sentence, its paired interval over seeds and verdict
  DIR/nll_by_depth.png   NLL against serving depth, one line per run
  DIR/figure3.png        training loss around the switch of the sweep's Figure 3 run
  DIR/switch_study.json  with [sweep] switch_study: each arm's per-seed values, the verdicts
  DIR/switch_study.md    the study's table and verdicts, made from switch_study.json alone

Invoking it again with the same DIR reuses finished runs and saved evaluations and resumes
interrupted runs (Ctrl-C saves a checkpoint first). See configs/sweeps/lm-cpu.toml for the file
format.
"""


def register(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument("sweep", metavar="SWEEP.toml", help="base config and [[runs]]")
    add_study_arguments(parser, "evaluating the finished ones")
    parser.add_argument(
        "--only",
        metavar="NAME,...",
        help="train only these runs, or every seed of these [[runs]] entries (the report still "
        "covers every finished run in DIR)",
    )
    parser.add_argument(
        "--device",
        default="auto",
        choices=["auto", "cpu", "cuda"],
        help="device of the final evaluations (training follows train.device)",
    )
    parser.add_argument(
        "--rows-from",
        metavar="RESULTS.json",
        help="an earlier results.json of this sweep (on one shared held-out set): its rows stand "
        "in for runs not finished in DIR, after a check that each is the run the sweep plans "
        "(trained on another machine, or in a directory since lost); the table names them",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fixedfirst.machine.device import resolve_device
    from fixedfirst.studies.sweep import load_sweep, not_finished, run_sweep

    spec = load_sweep(args.sweep)
    only = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else None
    device = str(resolve_device(args.device, "--device"))
    conducted = run_sweep(spec, args.out, only, args.quiet, device, args.jobs, args.rows_from)
    if not args.quiet:
        print_conducted(conducted, [], not_finished(spec, conducted.results))
    return 0
