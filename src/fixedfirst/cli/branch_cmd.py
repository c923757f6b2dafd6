"""`fixedfirst branch`: a new run from a run's checkpoint, with changed settings (`--set`); a
resume refuses such changes, a branch is a run of its own (train/branch.py)."""

from __future__ import annotations

import argparse


def register(parser: argparse.ArgumentParser) -> None:
    from fixedfirst.cli.arguments import add_set_argument

    parser.add_argument("run_dir", metavar="RUN", help="the run to branch from (not changed)")
    parser.add_argument("--out", required=True, metavar="NEW_RUN", help="the new run directory")
    parser.add_argument("--checkpoint", type=int, metavar="STEP", help="default: the newest")
    add_set_argument(parser)
    parser.add_argument(
        "--force",
        action="store_true",
        help="start in a directory that holds files fixedfirst did not write (never touched)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fixedfirst.errors import UserError
    from fixedfirst.files.paths import shown
    from fixedfirst.runs.directory import RunDir
    from fixedfirst.train.branch import branch_run
    from fixedfirst.train.interrupt import resume_command

    if not args.out.strip():
        raise UserError("--out is empty; name the new run directory")
    source, out = RunDir(args.run_dir), RunDir(args.out)
    if not source.path.is_dir():
        raise UserError(f"run directory {shown(source.path)} does not exist")
    if out.path.resolve() == source.path.resolve():
        raise UserError(
            f"--out {shown(out.path)} is the run being branched; a branch is a new run beside "
            "it: choose another --out (to go on training this run, `fixedfirst train --out "
            f"{shown(source.path)} --resume`)"
        )
    if out.holds_run() and out.has_checkpoints():
        raise UserError(
            f"--out {shown(out.path)} already holds a run; a branch is a new run: choose "
            "another --out"
        )
    config = source.saved_config(args.overrides)
    branch = branch_run(source, out, config, args.checkpoint, args.force)
    changed = f", with {branch.changes}" if branch.changes else " (nothing changed)"
    print(
        f"branched {shown(source.path)} at step {branch.checkpoint.step} into "
        f"{shown(out.path)}{changed}"
    )
    print(f"train it with: {resume_command(out.path, 1)}")
    return 0
