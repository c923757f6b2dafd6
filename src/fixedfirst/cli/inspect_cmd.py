"""`fixedfirst inspect`: a page that shows, token by token, where a run spends serving depth.

Writes PAGE.html (self-contained: opens from disk, needs no network) and PAGE.png beside it,
the same picture. Every bad input is refused before the model is loaded where it can be.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fixedfirst.cli.arguments import add_cache_argument, format_depths
from fixedfirst.evaluation.nll import EVAL_DEPTHS

DEFAULT_DEPTHS = format_depths(EVAL_DEPTHS)


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir", metavar="RUN", help="a run directory, or a directory written by export"
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--prompt", metavar="TEXT", help="a text to look at")
    what.add_argument("--file", metavar="FILE", help="a UTF-8 text file to look at")
    what.add_argument(
        "--task-example",
        metavar="N[..M]",
        help="the task's example N (or N..M) with its labels: chains evaluation sequences, "
        "bios people's biographies",
    )
    what.add_argument(
        "--validation",
        metavar="N[..M]",
        help="the run's validation sequence N (or N..M), as eval scores them",
    )
    parser.add_argument(
        "--depths", default=DEFAULT_DEPTHS, help=f"serving depths (default {DEFAULT_DEPTHS})"
    )
    parser.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="RULE=T",
        help="an exit rule's threshold, e.g. kl=1e-4 (repeatable; defaults as in generate --exit)",
    )
    parser.add_argument(
        "--max-depth",
        type=int,
        metavar="K",
        help="the exit rules never iterate more than K times (default: the deepest training "
        "depth, as generate --exit, at most the deepest of --depths)",
    )
    add_cache_argument(parser)
    parser.add_argument("--checkpoint", type=int, metavar="STEP", help="default: the newest")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument(
        "--out", required=True, metavar="PAGE.html", help="the page; PAGE.png is written beside it"
    )
    parser.add_argument(
        "--force", action="store_true", help="replace output files fixedfirst did not write"
    )
    parser.set_defaults(run=run)


def exit_modes(thresholds: list[str], max_depth: int, cache) -> list:
    """Every exit rule, at its default threshold or the one given as RULE=T, decoding through
    the `cache` strategy: the page's adaptive modes, built once here."""
    from fixedfirst.errors import UserError
    from fixedfirst.serve.exit_rules import EXIT_RULES, exit_rule
    from fixedfirst.serve.modes import Adaptive

    given: dict[str, float] = {}
    for item in thresholds:
        name, _, value = item.partition("=")
        if name not in EXIT_RULES:
            raise UserError(
                f"--threshold {item!r}: expected RULE=T with RULE one of {', '.join(EXIT_RULES)}"
            )
        try:
            given[name] = float(value)
        except ValueError:
            raise UserError(f"--threshold {item!r}: {value!r} is not a number") from None
    return [
        Adaptive(exit_rule(name, given.get(name), max_depth), cache_strategy=cache)
        for name in EXIT_RULES
    ]


def read_text_file(path: Path) -> str:
    from fixedfirst.errors import UserError

    if not path.is_file():
        raise UserError(f"--file {path} does not exist or is not a file")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(
            f"--file {path} is not UTF-8 text (byte {e.start + 1} is 0x{e.object[e.start]:02x})"
        ) from None


def text_option(args: argparse.Namespace) -> str:
    """The option that gave the text, as messages and the page name it."""
    return f"--file {args.file}" if args.file is not None else f"--prompt {args.prompt!r}"


def check_outputs(args: argparse.Namespace) -> tuple[Path, Path]:
    from fixedfirst.errors import UserError
    from fixedfirst.files.writing import check_output_file, is_our_figure
    from fixedfirst.inspection.page import is_our_page

    page = Path(args.out)
    if page.suffix.lower() not in (".html", ".htm"):
        raise UserError(f"--out {page}: the page is written as .html (PAGE.png goes beside it)")
    picture = page.with_suffix(".png")
    check_output_file(page, is_our_page, args.force)
    check_output_file(picture, is_our_figure, args.force, "--out's picture")
    return page, picture


def run(args: argparse.Namespace) -> int:
    from fixedfirst.cli.arguments import parse_depths
    from fixedfirst.errors import UserError
    from fixedfirst.inspection.record import check_depth_count
    from fixedfirst.inspection.sources import parse_indices
    from fixedfirst.model import check_depth, parse_cache_strategy
    from fixedfirst.serve.generation import check_utf8

    depths = parse_depths(args.depths)
    check_depth_count(depths)
    if args.max_depth is not None and check_depth(args.max_depth) > max(depths):
        raise UserError(
            f"--max-depth {args.max_depth} is beyond the deepest of --depths ({max(depths)}): "
            "the page could not show where a rule stops past it"
        )
    cache = parse_cache_strategy(args.cache)
    exit_modes(args.threshold, 1, cache)  # a bad threshold is refused before the model is loaded
    if args.prompt is not None:
        check_utf8(args.prompt)
    text = read_text_file(Path(args.file)) if args.file is not None else args.prompt
    if text is not None and not text.strip():
        raise UserError(f"{text_option(args)} is empty; give some text to inspect")
    indices = None
    for option, value in (("--task-example", args.task_example), ("--validation", args.validation)):
        if value is not None:
            indices = parse_indices(value, option)
    page, picture = check_outputs(args)
    return inspect_run(args, depths, cache, text, indices, page, picture)


def inspect_run(args, depths, cache, text, indices, page: Path, picture: Path) -> int:
    import torch

    from fixedfirst.inspection import inspect_sequences, page_record, write_page
    from fixedfirst.inspection.record import check_page_size
    from fixedfirst.inspection.sources import task_examples, text_sequence, validation_sequences
    from fixedfirst.machine.device import resolve_device, resolve_dtype
    from fixedfirst.model.serving import no_readout_refusal
    from fixedfirst.model.transformers_loop import TransformersLoop
    from fixedfirst.runs.served import load_served
    from fixedfirst.schedules import describe

    served = load_served(
        args.run_dir, args.checkpoint, resolve_device(args.device, "--device"), False
    )
    config = served.run.config if served.run is not None else None
    max_depth = args.max_depth or min(served.default_depth, max(depths))
    modes = exit_modes(args.threshold, max_depth, cache)
    rules = None  # why the page shows no exit rules, if it does not
    if isinstance(served.model, TransformersLoop):
        architecture = served.model.architecture
        if args.threshold or args.max_depth is not None:
            raise no_readout_refusal("an exit rule (--threshold, --max-depth)", architecture)
        modes = []
        rules = f"none: transformers' {architecture} has no readout between its passes"
    if text is not None:
        sequences = [text_sequence(served.tokenizer, config, text, text_option(args))]
        source = sequences[0].title
    elif args.task_example is not None:
        sequences = task_examples(config, indices, "--task-example")
        source = sequences[0].title if len(sequences) == 1 else f"task examples {args.task_example}"
    else:
        sequences = validation_sequences(served.run, indices, "--validation")
        source = f"validation sequences {args.validation} of the run's data, as eval scores them"
    check_page_size(sequences)
    device = next(served.model.parameters()).device
    dtype = torch.float32 if config is None else resolve_dtype(config.train.precision, device)
    inspection = inspect_sequences(served.model, sequences, depths, modes, cache, dtype)
    about = {
        "run": str(args.run_dir),
        "checkpoint": served.description,
        "schedule": "an export" if config is None else describe(config.schedule),
        "source": source,
        "precision": "fp32" if dtype == torch.float32 else "bf16 autocast (the run's precision)",
        "cache": cache.describe(),
    }
    if rules is not None:
        about["exit rules"] = rules
    record = page_record(inspection, served.tokenizer, served.model.vocab_size, about)
    write_page(page, record, picture)
    print_summary(record)
    print(f"wrote {page} and {picture}")
    return 0


def print_summary(record: dict) -> None:
    summary = record["summary"]
    print(f"{record['about']['checkpoint']}: {record['about']['source']}")
    print(f"{summary['scored']:,} scored positions; mean NLL (nats) by serving depth:")
    print("| depth | NLL |" + (" answers right |" if summary["answers"] else ""))
    print("| --- | --- |" + (" --- |" if summary["answers"] else ""))
    for depth, nll in summary["nll_by_depth"].items():
        accuracy = summary["accuracy_by_depth"][depth]
        right = f" {100 * accuracy:.1f}% |" if accuracy is not None else ""
        print(f"| {depth} | {nll:.4f} |{right}")
    for rule, stops in zip(record["rules"], summary["rules"], strict=True):
        right = "" if stops["accuracy"] is None else f", {100 * stops['accuracy']:.1f}% right"
        print(
            f"{rule['label']}: mean depth {stops['mean_depth']:.2f}, NLL {stops['nll']:.4f}{right}"
        )
