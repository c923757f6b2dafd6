"""`fixedfirst eval`: a run's checkpoint at many serving depths: validation NLL with its interval
over held-out blocks (beside the NLL of the checkpoint directory the run started from, when it
started from one) and a figure, or the task's own metric (bios recall, ...) for a run on a
task's data; or a Hugging Face checkpoint directory's profile by depth."""

from __future__ import annotations

import argparse
from pathlib import Path

from fixedfirst.cli.arguments import add_data_argument, format_depths, parse_depths
from fixedfirst.evaluation.nll import EVAL_DEPTHS
from fixedfirst.files import locks

DEFAULT_DEPTHS = format_depths(EVAL_DEPTHS)


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir",
        metavar="RUN",
        help="a run directory written by train, or a Hugging Face checkpoint directory (with "
        "--data and --out: its profile by depth)",
    )
    parser.add_argument("--checkpoint", type=int, metavar="STEP", help="default: the newest")
    parser.add_argument(
        "--depths",
        help=f"default {DEFAULT_DEPTHS}; of a checkpoint directory 1..D and 2D, D the larger "
        f"of 6 and the depth it was trained at",
    )
    parser.add_argument("--batches", type=int, help="validation batches (default: eval.batches)")
    parser.add_argument(
        "--blocks",
        type=int,
        default=64,
        metavar="N",
        help="a checkpoint directory: held-out blocks (rows of --seq-len tokens) to score "
        "(default %(default)s); the interval is over them",
    )
    parser.add_argument(
        "--seq-len",
        type=int,
        metavar="L",
        help="a checkpoint directory: tokens per block (default: 1024, or the longest the "
        "model takes)",
    )
    add_data_argument(parser)
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument(
        "--out",
        metavar="FILE",
        help="JSON output (default RUN/eval[-TASK]-step-STEP.json), its figure beside it as "
        ".png; needed for a checkpoint directory, which is not written to",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace an --out file fixedfirst did not write, or an evaluation there of "
        "other weights, rows or precision at depths this one lacks (one of the same weights, "
        "rows and precision at other depths is joined)",
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
    from fixedfirst.runs.opening import load_any_run

    if args.limit is not None and args.limit < 1:
        raise UserError(f"--limit must be >= 1, got {args.limit}")
    kind = data_kind(args.task)
    if kind.evaluate is None:
        raise UserError(
            f"--task {args.task}: the data kind {args.task!r} has no task metric; use --task nll"
        )
    loaded = load_any_run(args.run_dir, args.checkpoint, device, data=args.data)
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
    from fixedfirst.config.checkpoints import is_checkpoint_directory
    from fixedfirst.errors import UserError

    if args.depths is not None:
        parse_depths(args.depths)  # refused before anything else
    if is_checkpoint_directory(args.run_dir):
        return evaluate_checkpoint_directory(args)
    if args.limit is not None and args.task == "nll":
        raise UserError(
            f"--limit {args.limit} applies to a task's own metric (--task KIND, e.g. bios); "
            "validation NLL scores --batches N batches of train.micro_batch_size sequences "
            "(default: eval.batches)"
        )
    if args.batches is not None and args.batches < 1:
        raise UserError(f"--batches must be >= 1, got {args.batches}")
    if args.out is not None:
        check_outputs(Path(args.out), args.force)
    run_dir = Path(args.run_dir)
    if args.out is not None or not run_dir.is_dir():
        return evaluate(args)
    # The result goes into the run: one writer at a time (a training run holds it too).
    with locks.holding(run_dir, "eval", hint="give --out FILE to write the result elsewhere"):
        return evaluate(args)


def evaluate(args: argparse.Namespace) -> int:
    from fixedfirst.evaluation.cached import HeldOut, eval_path, evaluate_run, write_eval
    from fixedfirst.evaluation.profile import table
    from fixedfirst.files.writing import write_json_atomic
    from fixedfirst.machine.device import resolve_device

    depths = parse_depths(args.depths or DEFAULT_DEPTHS)
    out = Path(args.out) if args.out else None
    device = resolve_device(args.device, "--device")
    if args.task != "nll":
        result = task_metric(args, depths, device)
        out = out or Path(args.run_dir) / f"eval-{args.task}-step-{result['step']:07d}.json"
        write_json_atomic(out, result)
        print(f"wrote {out}")
        return 0
    held_out = HeldOut(batches=args.batches)
    result = evaluate_run(
        args.run_dir, depths, held_out, args.checkpoint, device, data=args.data, base=True
    )
    print(
        f"{args.run_dir} step {result['step']}: validation NLL (nats/token) over "
        f"{result['scored_tokens']:,} tokens in {len(result['row_tokens'])} blocks, 95% "
        f"intervals over the blocks; {result['schedule']}"
    )
    if result["base"] is not None:
        base = result["checkpoint"]
        print(
            f"beside the checkpoint it started from ({base['path']}, trained at depth "
            f"{base['depth']}) on the same blocks; change = run - checkpoint"
        )
    print(f"data: {result['data']}")
    print("\n".join(table(result)))
    if result["mean_serving_nll"] is not None:
        print(f"mean serving NLL (depths 1..16): {result['mean_serving_nll']:.4f}")
    out = out or eval_path(args.run_dir, result["step"])
    saved, said = write_eval(result, out, replace=args.force)
    print(said)
    print(save_profile_figure(saved, out, f"{args.run_dir} step {saved['step']}"))
    return 0


def check_outputs(out: Path, force: bool) -> None:
    """The JSON file and the figure beside it may be written (new, or fixedfirst's)."""
    from fixedfirst.evaluation.profile import figure_path
    from fixedfirst.files.writing import check_output_file, is_our_figure, is_our_json

    check_output_file(out, is_our_json, force)
    check_output_file(figure_path(out), is_our_figure, force, option="--out (its figure)")


def save_profile_figure(result: dict, out: Path, title: str) -> str:
    """The evaluation's figure beside its JSON: the model's NLL by depth, and the checkpoint
    it started from (when scored); the line that says where it went."""
    from fixedfirst.evaluation.profile import draw, figure_path
    from fixedfirst.files.paths import shown

    label = "this run" if result["run"] is not None else "checkpoint"
    series = [(label, result)]
    if result.get("base") is not None:
        series = [("checkpoint it started from", result["base"]), ("this run", result)]
    native = (result.get("checkpoint") or {}).get("depth")
    path = draw(series, native, title, figure_path(out))
    return f"wrote {shown(path)}"


def evaluate_checkpoint_directory(args: argparse.Namespace) -> int:
    """`fixedfirst eval CHECKPOINT_DIR --data DATA --out FILE`: its profile by depth."""
    from fixedfirst.config.run import model_section
    from fixedfirst.errors import UserError
    from fixedfirst.evaluation.cached import evaluate_checkpoint, write_eval
    from fixedfirst.evaluation.profile import table
    from fixedfirst.machine.device import resolve_device

    given = (
        [
            flag
            for flag, value in (("--checkpoint", args.checkpoint), ("--batches", args.batches))
            if value is not None
        ]
        + (["--task"] if args.task != "nll" else [])
        + (["--limit"] if args.limit else [])
    )
    if given:
        raise UserError(
            f"{given[0]} is for a run; {args.run_dir} is a checkpoint directory, scored by "
            "held-out NLL on --blocks rows of its data"
        )
    if args.data is None or args.out is None:
        raise UserError(
            f"{args.run_dir} is a checkpoint directory: give --data DATA (text prepared with "
            "its tokenizer: fixedfirst prepare INPUT... --tokenizer "
            f"{args.run_dir} --out DATA) and --out FILE.json (nothing is written into it)"
        )
    out = Path(args.out)
    check_outputs(out, args.force)
    section = model_section({"checkpoint": args.run_dir})
    native = section.checkpoint_depth or 1
    if args.depths is None:
        deepest = max(6, native)
        depths = [*range(1, deepest + 1), 2 * deepest]
    else:
        depths = parse_depths(args.depths)
    device = resolve_device(args.device, "--device")
    result = evaluate_checkpoint(args.run_dir, args.data, depths, args.blocks, args.seq_len, device)
    print(
        f"{args.run_dir} (trained at depth {native}): held-out NLL (nats/token) over "
        f"{result['scored_tokens']:,} tokens in {result['rows']} blocks of {result['seq_len']}, "
        "95% intervals over the blocks"
    )
    print(f"data: {result['data']}")
    print("\n".join(table(result)))
    saved, said = write_eval(result, out, replace=args.force)
    print(said)
    print(save_profile_figure(saved, out, f"{args.run_dir}"))
    return 0
