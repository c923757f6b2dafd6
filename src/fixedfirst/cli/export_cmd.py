"""`fixedfirst export`: one checkpoint of a run for inference, in fixedfirst's format (weights +
config.json + tokenizer files, read by `fixedfirst.load`), as a Hugging Face transformers model
(`--format hf`: `AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)`), or, for a
run that started from a checkpoint directory, handed back as a checkpoint of the same class with
a model card (`--format checkpoint`: export/handback.py)."""

from __future__ import annotations

import argparse
import sys


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN", help="a run directory written by train")
    parser.add_argument(
        "--out", required=True, metavar="DIR", help="a new (or empty) directory; parents are made"
    )
    parser.add_argument("--checkpoint", type=int, metavar="STEP", help="default: the newest")
    parser.add_argument(
        "--format",
        choices=("fixedfirst", "hf", "checkpoint"),
        default="fixedfirst",
        help="fixedfirst (default): for fixedfirst.load; hf: a transformers model with its "
        "modeling file and tokenizer; checkpoint: a run that started from a checkpoint "
        "directory, handed back as a checkpoint of the same class with a model card",
    )
    parser.add_argument(
        "--adapters",
        choices=("merged", "alone"),
        default="merged",
        help="--format checkpoint of a run with low-rank adapters: merged into the weights "
        "(default), or the adapters alone in peft's format",
    )
    parser.add_argument(
        "--cache",
        metavar="STRATEGY",
        help="--format hf: the KV cache the exported model generates with by default: full "
        "(default), bounded:S or last (its config.json's cache_slots; a call may change it). "
        "The fixedfirst format takes the strategy when it is served (generate --cache)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fixedfirst.errors import UserError

    if args.format == "hf":
        return run_hf(args)
    if args.format == "checkpoint":
        return run_checkpoint(args)
    if args.adapters != "merged":
        raise UserError("--adapters applies to --format checkpoint")
    if args.cache is not None:
        raise UserError(
            f"--cache {args.cache}: an export in fixedfirst's format serves every cache "
            "strategy; choose one when serving it (fixedfirst generate DIR --cache ...), or "
            "export with --format hf to set the transformers model's default"
        )
    from fixedfirst.export.writer import export_run
    from fixedfirst.runs.checkpoint import CheckpointManager
    from fixedfirst.runs.directory import RunDir

    checkpoints = CheckpointManager(RunDir(args.run_dir).checkpoints_path)
    before = {ckpt.step for ckpt in checkpoints.all()}
    config = export_run(args.run_dir, args.out, args.checkpoint)
    source = config["source"]
    tokenizer = config["tokenizer"]
    kind = "no tokenizer" if tokenizer is None else f"{tokenizer['kind']} tokenizer"
    print(
        f"exported {source['run']} step {source['step']} ({source['schedule']}, {kind}, "
        f"default depth {config['default_depth']}) to {args.out}"
    )
    print(f"load it with: fixedfirst.load({str(args.out)!r})")
    newer = [ckpt.step for ckpt in checkpoints.all() if ckpt.step > source["step"]]
    if newer:
        print(f"note: {newer_than_exported(args, source['step'], newer, before)}", file=sys.stderr)
    return 0


def newer_than_exported(
    args: argparse.Namespace, exported: int, newer: list[int], before: set[int]
) -> str:
    """Why the export is not of the newest checkpoint: asked for, written while the export
    ran (the run is training), or skipped for failing its checks."""
    head = f"exported step {exported}, not the newest checkpoint (step {max(newer)})"
    if args.checkpoint is not None:
        return f"{head}: as asked with --checkpoint"
    written = [step for step in newer if step not in before]
    if written:
        return (
            f"{head}: the run saved step {max(written)} while this export was written (it is "
            f"training); export again when it has finished, or give --checkpoint "
            f"{max(written)}"
        )
    return f"{head}: the newer ones failed their checks (see the warnings above)"


def run_checkpoint(args: argparse.Namespace) -> int:
    from fixedfirst.errors import UserError
    from fixedfirst.export.handback import export_checkpoint

    if args.cache is not None:
        raise UserError(
            "--cache sets a --format hf export's default KV cache; a checkpoint handed back "
            "generates as its class does"
        )
    card = export_checkpoint(args.run_dir, args.out, args.checkpoint, args.adapters)
    low, high = card["finished_for"]
    what = "its low-rank adapters alone" if args.adapters == "alone" else card["class"]
    print(
        f"handed back {card['run']} step {card['step']} ({card['schedule']}, finished for "
        f"depths {low}..{high} from {card['checkpoint']}) to {args.out} as {what}, with a "
        "model card (README.md)"
    )
    if args.adapters == "alone":
        print(
            f"load it with: PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained("
            f"{card['checkpoint']!r}), {str(args.out)!r})"
        )
    else:
        remote = ", trust_remote_code=True" if card["remote_code"] else ""
        print(f"load it with: AutoModelForCausalLM.from_pretrained({str(args.out)!r}{remote})")
    return 0


def run_hf(args: argparse.Namespace) -> int:
    from fixedfirst.errors import UserError
    from fixedfirst.export.hf import export_hf

    if args.adapters != "merged":
        raise UserError("--adapters applies to --format checkpoint")
    from fixedfirst.model import parse_cache_strategy

    cache = parse_cache_strategy(args.cache or "full")
    config = export_hf(args.run_dir, args.out, args.checkpoint, cache)
    source = config["fixedfirst"]
    print(
        f"exported {source['run']} step {source['step']} ({source['schedule']}, "
        f"{source['tokenizer']} tokenizer, depth {config['depth']}, {cache.describe()}) to "
        f"{args.out} as a transformers model"
    )
    print(
        f"load it with: AutoModelForCausalLM.from_pretrained({str(args.out)!r}, "
        "trust_remote_code=True)"
    )
    return 0
