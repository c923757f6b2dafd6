"""`fixedfirst figure3`: a fixed-first run's training loss around the switch (Figure 3)."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN", help="a fixed-first run directory")
    parser.add_argument(
        "--out",
        metavar="FILE",
        help="figure to write: .png, .pdf or .svg (default RUN/figure3.png)",
    )
    parser.add_argument(
        "--force", action="store_true", help="replace an --out file fixedfirst did not write"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fixedfirst.errors import UserError
    from fixedfirst.files import locks
    from fixedfirst.files.writing import check_figure_name, check_output_file, is_our_figure
    from fixedfirst.studies.sweep.figure3 import plot_figure3

    if not Path(args.run_dir).is_dir():
        raise UserError(f"run directory {args.run_dir} does not exist")
    out = Path(args.out) if args.out else Path(args.run_dir) / "figure3.png"
    check_figure_name(out)
    check_output_file(out, is_our_figure, args.force)
    # Into the run (the default): one writer at a time, as for every file of a run.
    into_run = args.out is None
    hint = "give --out FILE to draw it elsewhere"
    with locks.holding(args.run_dir, "figure3", hint) if into_run else contextlib.nullcontext():
        print(f"wrote {plot_figure3(args.run_dir, out)}")
    return 0
