"""`fixedfirst downstream`: lm-evaluation-harness tasks at several serving depths, as one table."""

from __future__ import annotations

import argparse
from pathlib import Path

from fixedfirst.files import locks

DEFAULT_TASKS = "hellaswag,piqa,arc_easy"
DEFAULT_DEPTHS = "1,4,8,16"


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir", metavar="RUN", help="a run directory, or a directory written by export"
    )
    parser.add_argument(
        "--tasks", default=DEFAULT_TASKS, help=f"harness task names (default {DEFAULT_TASKS})"
    )
    parser.add_argument(
        "--depths", default=DEFAULT_DEPTHS, help=f"serving depths (default {DEFAULT_DEPTHS})"
    )
    parser.add_argument(
        "--limit", type=int, metavar="N", help="only the first N documents of each task"
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="where downstream.json and downstream.md go (default RUN/downstream)",
    )
    parser.add_argument(
        "--include-path", metavar="DIR", help="a directory of extra harness task YAML files"
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=16,
        help="log-likelihood requests per forward (default 16)",
    )
    parser.add_argument("--checkpoint", type=int, metavar="STEP", help="default: the newest")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fixedfirst.cli.arguments import parse_depths
    from fixedfirst.errors import UserError
    from fixedfirst.runs.exported import is_export

    depths = parse_depths(args.depths)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if not tasks:
        raise UserError("--tasks: give at least one task name")
    if args.limit is not None and args.limit < 1:
        raise UserError(f"--limit must be >= 1, got {args.limit}")
    if args.batch_size < 1:
        raise UserError(f"--batch-size must be >= 1, got {args.batch_size}")
    if not Path(args.run_dir).is_dir():
        raise UserError(f"{args.run_dir}: no such run or export directory")
    if args.out is None and is_export(args.run_dir):
        raise UserError("give --out DIR for an export (it is not written into)")
    out = Path(args.out) if args.out else Path(args.run_dir) / "downstream"
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: exists and is not a directory")
    if args.out is not None:
        return evaluate(args, depths, tasks, out)
    # Into the run (the default): one writer at a time, as for every file of a run.
    with locks.holding(args.run_dir, "downstream", "give --out DIR to write the table elsewhere"):
        return evaluate(args, depths, tasks, out)


def evaluate(args: argparse.Namespace, depths: list[int], tasks: list[str], out: Path) -> int:
    from fixedfirst.harness import require_lm_eval
    from fixedfirst.harness.downstream import go_offline, hub_reachable

    # Before the hub libraries are imported: they read the offline switches once, at import.
    network = hub_reachable()
    if not network:
        go_offline()
    require_lm_eval()

    import lm_eval

    from fixedfirst.harness.downstream import (
        FORMAT,
        VERSION,
        evaluate_depths,
        markdown_table,
        task_manager,
        write_report,
    )
    from fixedfirst.harness.model import FixedFirstLM

    manager = task_manager(tasks, args.include_path)
    lm = FixedFirstLM(
        str(args.run_dir),
        depth=depths[0],
        checkpoint=args.checkpoint,
        batch_size=args.batch_size,
        device=args.device,
    )
    results = evaluate_depths(lm, tasks, depths, manager, args.limit, network)
    report = {
        "format": FORMAT,
        "version": VERSION,
        "source": lm.served.description,
        "tasks": tasks,
        "depths": depths,
        "limit": args.limit,
        "lm_eval_version": lm_eval.__version__,
        "results": results,
    }
    print(markdown_table(report), end="")
    json_path, md_path = write_report(report, out)
    print(f"wrote {json_path} and {md_path}")
    return 0
