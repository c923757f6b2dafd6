"""`fixedfirst train`: train one run into a run directory (or resume it)."""

from __future__ import annotations

import argparse
import os
import sys

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
    parser.add_argument("--quiet", action="store_true", help="print nothing but errors")
    parser.add_argument(
        "--nproc",
        type=int,
        metavar="N",
        help="train with N processes on this machine (one per GPU): runs `torchrun --standalone "
        "--nproc_per_node N -m fixedfirst train` with the other arguments; DDP, or FSDP2 with "
        "train.strategy = 'fsdp'",
    )
    parser.set_defaults(run=run)


def torchrun_command(args: argparse.Namespace) -> list[str]:
    """The torchrun command line that `--nproc N` stands for (the same arguments, minus it)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc_per_node", str(args.nproc), "-m", "fixedfirst", "train"]
    if args.config is not None:
        command.append(args.config)
    command += ["--out", args.out]
    for override in args.overrides:
        command += ["--set", override]
    if args.resume:
        command.append("--resume")
    if args.stop_after is not None:
        command += ["--stop-after", str(args.stop_after)]
    if args.quiet:
        command.append("--quiet")
    return command


def launch(args: argparse.Namespace, config: RunConfig) -> None:
    """Replace this process by torchrun, after the checks that need no process group, so that a
    bad configuration is one line here instead of one failure per process."""
    from fixedfirst.errors import UserError

    if args.nproc < 1:
        raise UserError(f"--nproc must be >= 1, got {args.nproc}")
    if "LOCAL_RANK" in os.environ:
        raise UserError("--nproc launches torchrun; under torchrun already, leave it out")
    t = config.train
    micro = t.micro_batch_on(args.nproc)
    if t.batch_size % args.nproc or (t.batch_size // args.nproc) % micro:
        raise UserError(
            f"train.batch_size = {t.batch_size} must split into {args.nproc} rank(s) of whole "
            f"micro-batches of {micro}"
        )
    command = torchrun_command(args)
    sys.stdout.flush()
    os.execv(command[0], command)


def run(args: argparse.Namespace) -> int:
    from fixedfirst.errors import UserError
    from fixedfirst.train import distributed
    from fixedfirst.train.counters import format_summary
    from fixedfirst.train.run_dir import RunDir

    if args.stop_after is not None and args.stop_after < 1:
        raise UserError(f"--stop-after must be >= 1, got {args.stop_after}")
    if args.config is None:
        if not args.resume:
            raise UserError("give a CONFIG.toml (or --resume to continue RUN/config.toml)")
        config_path = RunDir(args.out).config_path
        if not config_path.is_file():
            raise UserError(f"--resume: {args.out} holds no run (no config.toml)")
        config = load_config(config_path, args.overrides)
    else:
        config = load_config(args.config, args.overrides)
    if args.nproc is not None:
        launch(args, config)
    try:
        summary, is_main = train(args, config)
        if is_main and not args.quiet:
            print(format_summary(summary))
    finally:
        distributed.stop()  # after the trainer is gone: see its docstring
    return 0


def train(args: argparse.Namespace, config: RunConfig) -> tuple[dict, bool]:
    """Train; return the summary and whether this is rank 0. The trainer (and with it a DDP
    model) lives only in here, so it is freed before the process group is destroyed."""
    from fixedfirst.train.trainer import Trainer

    trainer = Trainer(config, args.out, resume=args.resume, quiet=args.quiet)
    return trainer.train(stop_after=args.stop_after), trainer.is_main
