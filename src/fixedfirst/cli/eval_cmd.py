"""`fixedfirst eval`: a run's checkpoint at many serving depths: validation NLL, or the task's own
metric (bios recall, ...) for a run on a task's data."""

from __future__ import annotations

import argparse
from pathlib import Path

from fixedfirst.cli.arguments import add_data_argument, format_depths, parse_depths
from fixedfirst.evaluation.nll import EVAL_DEPTHS
from fixedfirst.files import locks

DEFAULT_DEPTHS = format_depths(EVAL_DEPTHS)


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN", help="a run directory written by train")
    parser.add_argument("--checkpoint", type=int, metavar="STEP", help="default: the newest")
    parser.add_argument("--depths", default=DEFAULT_DEPTHS, help=f"default {DEFAULT_DEPTHS}")
    parser.add_argument("--batches", type=int, help="validation batches (default: eval.batches)")
    add_data_argument(parser)
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument(
        "--out", metavar="FILE", help="JSON output (default RUN/eval[-TASK]-step-STEP.json)"
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace an --out file fixedfirst did not write, or the run's evaluation at "
        "other depths",
    )
    parser.add_argument(
        "--task",
        default="nll",
        metavar="nll|KIND",
        help="nll: validation NLL (default); or the run's data kind (e.g. bios) for that task's "
        "own metric (bios: recalled bits per person)",
    )
    parser.add_argument(
        "--limit",
        type=int,
        metavar="N",
        help="task metric only (--task KIND): score the first N examples (bios: people); default "
        "all. NLL: --batches",
    )
    parser.set_defaults(run=run)


def task_metric(args: argparse.Namespace, depths: list[int], device) -> dict:
    """The task's own metric of a run on the task's data, printed as a table."""
    from fixedfirst.data.registry import data_kind
    from fixedfirst.errors import UserError
    from fixedfirst.runs.opening import load_run

    if args.limit is not None and args.limit < 1:
        raise UserError(f"--limit must be >= 1, got {args.limit}")
    kind = data_kind(args.task)
    if kind.evaluate is None:
        raise UserError(
            f"--task {args.task}: the data kind {args.task!r} has no task metric; use --task nll"
        )
    loaded = load_run(args.run_dir, args.checkpoint, device, data=args.data)
    if loaded.config.data.kind != args.task:
        raise UserError(
            f"--task {args.task} needs a run trained on [data] kind = {args.task!r}; "
            f"{args.run_dir} trained on {loaded.config.data.kind!r} (use --task nll)"
        )
    report = kind.evaluate(loaded.model, loaded.config, depths, args.limit)
    step = loaded.checkpoint.step
    print(f"{args.run_dir} step {step}: {report.headline}")
    print(report.table)
    return {
        "format": "fixedfirst-task-eval",
        "task": args.task,
        "run": str(args.run_dir),
        "step": step,
        **report.record,
    }


def run(args: argparse.Namespace) -> int:
    from fixedfirst.errors import UserError
    from fixedfirst.files.writing import check_output_file, is_our_json

    parse_depths(args.depths)  # refused before anything else
    if args.limit is not None and args.task == "nll":
        raise UserError(
            f"--limit {args.limit} applies to a task's own metric (--task KIND, e.g. bios); "
            "validation NLL scores --batches N batches of train.micro_batch_size sequences "
            "(default: eval.batches)"
        )
    if args.batches is not None and args.batches < 1:
        raise UserError(f"--batches must be >= 1, got {args.batches}")
    if args.out is not None:
        check_output_file(Path(args.out), is_our_json, args.force)
    run_dir = Path(args.run_dir)
    if args.out is not None or not run_dir.is_dir():
        return evaluate(args)
    # The result goes into the run: one writer at a time (a training run holds it too).
    with locks.holding(run_dir, "eval", hint="give --out FILE to write the result elsewhere"):
        if args.task == "nll" and not args.force:
            from fixedfirst.evaluation.cached import check_kept_eval

            check_kept_eval(run_dir, parse_depths(args.depths), args.checkpoint, args.data)
        return evaluate(args)


def evaluate(args: argparse.Namespace) -> int:
    from fixedfirst.evaluation.cached import HeldOut, eval_path, evaluate_run, write_eval
    from fixedfirst.files.writing import write_json_atomic
    from fixedfirst.machine.device import resolve_device

    depths = parse_depths(args.depths)
    out = Path(args.out) if args.out else None
    device = resolve_device(args.device, "--device")
    if args.task != "nll":
        result = task_metric(args, depths, device)
        out = out or Path(args.run_dir) / f"eval-{args.task}-step-{result['step']:07d}.json"
        write_json_atomic(out, result)
        print(f"wrote {out}")
        return 0
    result = evaluate_run(
        args.run_dir, depths, HeldOut(batches=args.batches), args.checkpoint, device, data=args.data
    )
    print(
        f"{args.run_dir} step {result['step']}: validation NLL (nats/token) over "
        f"{result['scored_tokens']:,} tokens; {result['schedule']}"
    )
    print(f"data: {result['data']}")
    print("| depth | NLL |\n| --- | --- |")
    for d, v in result["nll_by_depth"].items():
        print(f"| {d} | {v:.4f} |")
    if result["mean_serving_nll"] is not None:
        print(f"mean serving NLL (depths 1..16): {result['mean_serving_nll']:.4f}")
    out = out or eval_path(args.run_dir, result["step"])
    write_eval(result, out)
    print(f"wrote {out}")
    return 0
