"""Entry point of the `fixedfirst` command: parse, dispatch, and turn user errors into one line."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from fixedfirst.errors import UserError

# subcommand -> module under fixedfirst.cli with `register(subparsers)` and `run(args)`.
# Imported lazily per command so that `fixedfirst --help` stays quick.
COMMANDS: dict[str, tuple[str, str]] = {
    "bios": ("bios_cmd", "the synthetic recall experiment (Figure 1)"),
    "chains": ("chains_cmd", "every schedule on a task where serving depth decides the answer"),
    "moe": ("moe_cmd", "fixed-first on a looped mixture-of-experts (transformers' Inkling2Loop)"),
    "finishing": ("finishing_cmd", "finishing stages for models trained at one depth"),
    "ablation": ("ablation_cmd", "architecture switches against fixed-depth collapse off depth"),
    "train": ("train_cmd", "train a looped transformer with a depth schedule"),
    "branch": ("branch_cmd", "a new run from a run's checkpoint, with changed settings"),
    "finish": (
        "finish_cmd",
        "make a looped checkpoint trained at one depth serve at every depth, with a control",
    ),
    "eval": ("eval_cmd", "validation NLL of a run at many serving depths"),
    "diagnose": ("diagnose_cmd", "the update diagnostic (Figure 4): deep vs shallow updates"),
    "compute": ("compute_cmd", "modeled FLOPs of a configuration and its savings vs uniform"),
    "plan": ("plan_cmd", "memory per GPU, what fits and the wall-clock of a run on GPUs"),
    "config-reference": ("reference_cmd", "print every configuration key with its default"),
    "prepare": ("prepare_cmd", "tokenize text, JSONL, Parquet or a HF dataset into token shards"),
    "sweep": ("sweep_cmd", "train, evaluate and tabulate a list of runs (the schedule table)"),
    "figure3": ("figure3_cmd", "plot a fixed-first run's loss around the switch (Figure 3)"),
    "generate": (
        "generate_cmd",
        "stream text from a run at a fixed depth, depth-speculated or with a per-token exit rule",
    ),
    "export": (
        "export_cmd",
        "write a run's weights, config and tokenizer for fixedfirst or transformers",
    ),
    "downstream": ("downstream_cmd", "lm-evaluation-harness tasks at several serving depths"),
    "inspect": ("inspect_cmd", "a page showing each token's prediction at every serving depth"),
    "frontier": (
        "frontier_cmd",
        "a run's exit frontier: quality and speed against depth for fixed depths and exit rules",
    ),
    "serving-economics": (
        "economics_cmd",
        "every run's exit frontier compared across schedules (compute saved at matched quality)",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fixedfirst",
        description="Train and study adaptive-depth looped transformers (fixed-first schedules).",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, summary) in COMMANDS.items():
        mod = importlib.import_module(f"fixedfirst.cli.{module}")
        mod.register(subparsers.add_parser(name, help=summary, description=summary))
    return parser


def one_line(error: Exception) -> str:
    """A UserError's message; for an OSError that no write caught with its own words (a full
    disk, a read-only directory, a file that vanished), the path and the system's reason."""
    if isinstance(error, UserError) or not isinstance(error, OSError):
        return str(error)
    from fixedfirst.files.paths import shown
    from fixedfirst.files.writing import DISK_FULL, remedy

    where = f"{shown(error.filename)}: " if error.filename is not None else ""
    full = f" ({remedy(error)})" if error.errno in DISK_FULL else ""
    return f"{where}{error.strerror or error}{full}"


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    import fixedfirst.tasks  # noqa: F401  (registers the tasks' data kinds)

    try:
        code = args.run(args)
    except (UserError, OSError) as e:
        # Under torchrun every process meets the same error; one of them says it.
        if os.environ.get("RANK", "0") == "0":
            print(f"fixedfirst {args.command}: error: {one_line(e)}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt as e:
        # Training stops at a step boundary with a checkpoint and says how to resume (str(e));
        # the status tells a scheduler whether to requeue it (train/interrupt.py).
        from fixedfirst.train.interrupt import INTERRUPT_STATUS, TrainingInterrupted

        stopped = e if isinstance(e, TrainingInterrupted) else None
        if os.environ.get("RANK", "0") == "0":
            detail = f": {e}" if str(e) else ""
            reason = stopped.reason if stopped is not None else "interrupted"
            print(f"fixedfirst {args.command}: {reason}{detail}", file=sys.stderr)
        sys.exit(stopped.exit_status if stopped is not None else INTERRUPT_STATUS)
    sys.exit(code or 0)
