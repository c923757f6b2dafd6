"""`fixedfirst finish`: make a looped checkpoint someone else trained at one depth serve at every
depth: a finishing run from its weights, optionally its control at the checkpoint's own depth on
the same tokens, then the profile by depth of the checkpoint, the control and the finished model
(studies/checkpoint_finish.py; docs/guides/checkpoints.md)."""

from __future__ import annotations

import argparse
import os
import sys

from fixedfirst.cli.arguments import add_set_argument

EPILOG = """\
examples:
  fixedfirst prepare corpus/ --tokenizer inkling/ --out data/inkling
  fixedfirst finish inkling/ --data data/inkling --out finish/ --tokens 20000000 --control
  fixedfirst finish inkling/ --data data/inkling --out finish/ --tokens 20000000 \\
      --set train.lr=1e-5 --set train.precision=bf16 --nproc 8
  fixedfirst export finish/finished --format checkpoint --out inkling-finished/
"""


def register(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument(
        "checkpoint",
        metavar="CHECKPOINT",
        help="a Hugging Face checkpoint directory (config.json, safetensors weights, tokenizer "
        "files) of a looped architecture fixedfirst sets the depth of, or its own export",
    )
    parser.add_argument(
        "--data",
        required=True,
        metavar="DATA",
        help="text prepared with the checkpoint's tokenizer (fixedfirst prepare INPUT... "
        "--tokenizer CHECKPOINT --out DATA)",
    )
    parser.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="where the runs go (DIR/finished, DIR/control) and the profile (DIR/profile.json "
        "and .png); the same command again resumes and reuses them",
    )
    parser.add_argument("--tokens", type=int, metavar="N", help="the finishing run's tokens")
    parser.add_argument(
        "--flops", type=float, metavar="F", help="or its modeled training-FLOP budget"
    )
    parser.add_argument(
        "--k-max",
        type=int,
        metavar="K",
        help="finish at depths uniform in 1..K (default: twice the checkpoint's depth); "
        "--set schedule.* for another schedule kind",
    )
    parser.add_argument(
        "--control",
        action="store_true",
        help="also train the control: the same tokens at the checkpoint's own depth",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="a run configuration for [schedule], [train], [eval] ([model] and [data] are "
        "finish's)",
    )
    add_set_argument(parser)
    parser.add_argument(
        "--stop-after",
        type=int,
        metavar="STEPS",
        help="pause the run in training once it has trained STEPS steps (checkpointed)",
    )
    parser.add_argument(
        "--nproc",
        type=int,
        metavar="N",
        help="train with N processes on this machine (one per GPU), as `fixedfirst train "
        "--nproc` does",
    )
    parser.add_argument("--quiet", action="store_true", help="print nothing but errors")
    parser.set_defaults(run=run)


def worker_arguments(args: argparse.Namespace) -> list[str]:
    """The arguments every process of `--nproc N` gets: the same command, minus `--nproc`."""
    arguments = ["finish", args.checkpoint, "--data", args.data, "--out", args.out]
    for flag, value in (
        ("--tokens", args.tokens),
        ("--flops", args.flops),
        ("--k-max", args.k_max),
        ("--config", args.config),
        ("--stop-after", args.stop_after),
    ):
        if value is not None:
            arguments += [flag, str(value)]
    for override in args.overrides:
        arguments += ["--set", override]
    arguments += ["--control"] if args.control else []
    arguments += ["--quiet"] if args.quiet else []
    return arguments


def run(args: argparse.Namespace) -> int:
    from fixedfirst.errors import UserError
    from fixedfirst.studies.checkpoint_finish import describe_plan, plan_finish

    if not args.out.strip():
        raise UserError("--out is empty; name the directory the runs go in")
    if args.tokens is not None and args.flops is not None:
        raise UserError("--tokens and --flops are two budgets; give one")
    if args.stop_after is not None and args.stop_after < 1:
        raise UserError(f"--stop-after must be >= 1, got {args.stop_after}")
    if args.k_max is not None and args.k_max < 1:
        raise UserError(f"--k-max must be >= 1, got {args.k_max}")
    budget = {key: value for key, value in (("tokens", args.tokens), ("flops", args.flops))}
    budget = {key: value for key, value in budget.items() if value is not None}
    plan = plan_finish(
        args.checkpoint,
        args.data,
        args.out,
        budget,
        args.k_max,
        args.control,
        args.config,
        args.overrides,
    )
    main_rank = os.environ.get("RANK", "0") == "0"
    if not args.quiet and main_rank:
        print(f"finishing {args.checkpoint} (trained at depth {plan.native}):")
        for line in describe_plan(plan):
            print(f"  {line}")
    if args.nproc is not None:
        return launch(args)
    return finish(args, plan, main_rank)


def launch(args: argparse.Namespace) -> int:
    from fixedfirst.errors import UserError
    from fixedfirst.train.launcher import launch as launch_processes

    if args.nproc < 1:
        raise UserError(f"--nproc must be >= 1, got {args.nproc}")
    if "LOCAL_RANK" in os.environ:
        raise UserError("--nproc starts the processes itself; under torchrun, leave it out")
    sys.stdout.flush()
    again = "run the same `fixedfirst finish` command again: it resumes and reuses the runs"
    return launch_processes(args.nproc, worker_arguments(args), again)


def finish(args: argparse.Namespace, plan, main_rank: bool) -> int:
    """Train the plan's runs, then (rank 0) score and write the profile."""
    from fixedfirst.files.paths import shown
    from fixedfirst.machine.device import resolve_device
    from fixedfirst.studies.checkpoint_finish import (
        FINISHED,
        Paused,
        profile_finish,
        profile_table,
        train_runs,
        write_profile,
    )
    from fixedfirst.train import distributed

    try:
        train_runs(plan, args.quiet, args.stop_after)
    except Paused as paused:
        if main_rank:
            print(paused)
        return 0
    finally:
        distributed.stop()
    if not main_rank:
        return 0
    device = resolve_device(plan.runs[FINISHED].train.device)
    profile = profile_finish(plan, device)
    files = write_profile(profile, plan.out)
    if not args.quiet:
        print(
            f"profile by depth: held-out NLL over {profile['scored_tokens']:,} tokens in "
            f"{profile['blocks']} blocks, 95% intervals over the blocks, changes paired by block"
        )
        print("\n".join(profile_table(profile)))
        for path in files:
            print(f"wrote {shown(path)}")
        print(
            f"hand it back: fixedfirst export {shown(plan.path(FINISHED))} --format checkpoint "
            "--out NEW_CHECKPOINT"
        )
    return 0
