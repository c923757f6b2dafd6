"""`fixedfirst figure3`: a fixed-first run's training loss around the switch (Figure 3)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN", help="a fixed-first run directory")
    parser.add_argument("--out", metavar="FILE", help="PNG to write (default RUN/figure3.png)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fixedfirst.errors import UserError
    from fixedfirst.experiments.sweep.figure3 import plot_figure3

    if not Path(args.run_dir).is_dir():
        raise UserError(f"run directory {args.run_dir} does not exist")
    out = Path(args.out) if args.out else Path(args.run_dir) / "figure3.png"
    if not out.parent.is_dir():
        raise UserError(f"--out {out}: directory {out.parent} does not exist")
    print(f"wrote {plot_figure3(args.run_dir, out)}")
    return 0
