"""`fixedfirst train`: train one run into a run directory (or resume it)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from fixedfirst.cli.arguments import add_set_argument
from fixedfirst.config import RunConfig, load_config


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "config",
        nargs="?",
        metavar="CONFIG.toml",
        help="run configuration; with --resume it defaults to RUN/config.toml",
    )
    parser.add_argument("--out", required=True, metavar="RUN", help="the run directory")
    add_set_argument(parser)
    parser.add_argument(
        "--resume", action="store_true", help="continue from the latest complete checkpoint"
    )
    parser.add_argument(
        "--stop-after",
        type=int,
        metavar="STEPS",
        help="pause (checkpointed) once this many steps are done; continue later with --resume",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="start in a directory that holds files fixedfirst did not write (they are never "
        "touched; one named like a run's own file is still refused)",
    )
    parser.add_argument("--quiet", action="store_true", help="print nothing but errors")
    parser.add_argument(
        "--nproc",
        type=int,
        metavar="N",
        help="train with N processes on this machine (one per GPU), started as `torchrun "
        "--standalone --nproc_per_node N -m fixedfirst train` starts them, with the other "
        "arguments; DDP, or FSDP2 with train.strategy = 'fsdp'",
    )
    parser.set_defaults(run=run)


def worker_arguments(args: argparse.Namespace) -> list[str]:
    """The arguments every process of `--nproc N` gets: the same command, minus `--nproc`."""
    arguments = ["train"]
    if args.config is not None:
        arguments.append(args.config)
    arguments += ["--out", args.out]
    for override in args.overrides:
        arguments += ["--set", override]
    if args.resume:
        arguments.append("--resume")
    if args.stop_after is not None:
        arguments += ["--stop-after", str(args.stop_after)]
    if args.force:
        arguments.append("--force")
    if args.quiet:
        arguments.append("--quiet")
    return arguments


def launch(args: argparse.Namespace, config: RunConfig) -> int:
    """Train in `--nproc` processes on this machine (`train/launcher.py`), after the checks
    that need no process group, so that a bad configuration is one line here instead of one
    failure per process; their exit status."""
    from fixedfirst.errors import UserError
    from fixedfirst.train.interrupt import resume_command
    from fixedfirst.train.launcher import launch as launch_processes

    if args.nproc < 1:
        raise UserError(f"--nproc must be >= 1, got {args.nproc}")
    if "LOCAL_RANK" in os.environ:
        raise UserError("--nproc starts the processes itself; under torchrun, leave it out")
    t = config.train
    micro = t.micro_batch(args.nproc)
    if t.batch_size % args.nproc or (t.batch_size // args.nproc) % micro:
        raise UserError(
            f"train.batch_size = {t.batch_size} must split into {args.nproc} rank(s) of whole "
            f"micro-batches of {micro}"
        )
    sys.stdout.flush()
    resume = resume_command(Path(args.out), args.nproc)
    return launch_processes(args.nproc, worker_arguments(args), resume)


def run(args: argparse.Namespace) -> int:
    from fixedfirst.errors import UserError
    from fixedfirst.runs.directory import RunDir
    from fixedfirst.train import distributed
    from fixedfirst.train.counters import format_summary
    from fixedfirst.train.interrupt import stop_requests_kept

    if args.stop_after is not None and args.stop_after < 1:
        raise UserError(f"--stop-after must be >= 1, got {args.stop_after}")
    if not args.out.strip():
        raise UserError("--out is empty; name the run directory (it is made if missing)")
    if args.config is None:
        if not args.resume:
            raise UserError("give a CONFIG.toml (or --resume to continue RUN/config.toml)")
        config = RunDir(args.out).saved_config(args.overrides)
    else:
        config = load_config(args.config, args.overrides, written=True)
    if not args.resume:
        check_new_run(config, say=not args.quiet and os.environ.get("RANK", "0") == "0")
    if args.nproc is not None:
        return launch(args, config)
    try:
        with stop_requests_kept():  # a preemption while the run sets up is kept for it
            summary, is_main = train(args, config)
        if is_main and not args.quiet:
            print(format_summary(summary))
    finally:
        distributed.stop()  # after the trainer is gone: see its docstring
    return 0


def check_new_run(config: RunConfig, say: bool) -> None:
    """Refuse a fixed-first run whose switch leaves no finishing step (it would train and be
    reported as fixed-first at a fixed depth); say when the budget reads the data more than
    once. A study builds its runs itself: its plan is never refused here."""
    from fixedfirst.cli.compute_cmd import no_finishing_step
    from fixedfirst.compute.run_cost import run_plan
    from fixedfirst.data.prepared import is_prepared, passes_note
    from fixedfirst.errors import UserError

    budget = run_plan(config)
    never = no_finishing_step(config, budget)
    if never is not None:
        raise UserError(never)
    path = config.data.path
    if say and config.data.kind == "tokens" and path is not None and is_prepared(path):
        passes = passes_note(path, budget.tokens)
        if passes is not None:
            print(f"note: {passes}", flush=True)


def train(args: argparse.Namespace, config: RunConfig) -> tuple[dict, bool]:
    """Train; return the summary and whether this is rank 0. The trainer (and with it a DDP
    model) lives only in here, so it is freed before the process group is destroyed."""
    from fixedfirst.train.trainer import Trainer

    trainer = Trainer(config, args.out, resume=args.resume, quiet=args.quiet, force=args.force)
    return trainer.train(stop_after=args.stop_after), trainer.is_main
