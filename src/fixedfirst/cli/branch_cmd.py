"""`fixedfirst branch`: a new run from a run's checkpoint, with changed settings (`--set`); a
resume refuses such changes, a branch is a run of its own (train/branch.py)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fixedfirst.config import RunConfig
    from fixedfirst.runs.directory import RunDir


def register(parser: argparse.ArgumentParser) -> None:
    from fixedfirst.cli.arguments import add_set_argument

    parser.add_argument("run_dir", metavar="RUN", help="the run to branch from (not changed)")
    parser.add_argument("--out", required=True, metavar="NEW_RUN", help="the new run directory")
    parser.add_argument("--checkpoint", type=int, metavar="STEP", help="default: the newest")
    parser.add_argument(
        "--finish",
        type=float,
        metavar="FRACTION",
        help="a finishing stage for a run trained at one depth: go on from its last checkpoint "
        "for FRACTION of its tokens (0.1: 10%%), each step at a depth uniform in 1..--finish-k-max",
    )
    parser.add_argument(
        "--finish-k-max", type=int, metavar="K", help="the deepest finishing depth (with --finish)"
    )
    parser.add_argument(
        "--finish-lr",
        choices=("constant", "rewarm"),
        default="constant",
        help="the finishing learning rate: constant at the run's final rate, or rewarm to "
        "train.finishing.peak of the peak and decay (default: constant)",
    )
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
    if args.finish is None:
        if args.finish_k_max is not None:
            raise UserError("--finish-k-max goes with --finish FRACTION; add it or drop this")
        config = source.saved_config(args.overrides)
    else:
        config = finishing_config(source, args)
    branch = branch_run(source, out, config, args.checkpoint, args.force)
    changed = f", with {branch.changes}" if branch.changes else " (nothing changed)"
    print(
        f"branched {shown(source.path)} at step {branch.checkpoint.step} into "
        f"{shown(out.path)}{changed}"
    )
    print(f"train it with: {resume_command(out.path, 1)}")
    return 0


def finishing_config(source: RunDir, args: argparse.Namespace) -> RunConfig:
    """The branch's configuration for --finish: the finishing stage of the source run (trained
    to the end), then the --set overrides (e.g. train.finishing.peak)."""
    from fixedfirst.config import RunConfig, apply_overrides
    from fixedfirst.errors import UserError
    from fixedfirst.studies.kit.runs import finished_summary
    from fixedfirst.train.finishing_stage import finishing_stage

    if args.finish_k_max is None:
        raise UserError("--finish needs --finish-k-max K, the deepest depth it trains at")
    if args.checkpoint is not None:
        raise UserError("--finish goes on from the run's last checkpoint; drop --checkpoint")
    summary = finished_summary(source)
    if summary is None:
        raise UserError(
            f"--finish finishes a run trained to the end of its budget, and {source.path} is "
            "not; train it to the end first (fixedfirst train --resume)"
        )
    stage = finishing_stage(
        source.saved_config(), summary["steps"], args.finish, args.finish_k_max, args.finish_lr
    )
    return RunConfig.from_dict(apply_overrides(stage.to_dict(), args.overrides))
