"""`fixedfirst export`: one checkpoint of a run for inference, in fixedfirst's format (weights +
config.json + tokenizer files, read by `fixedfirst.load`) or as a Hugging Face transformers model
(`--format hf`: `AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)`)."""

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
        choices=("fixedfirst", "hf"),
        default="fixedfirst",
        help="fixedfirst (default): for fixedfirst.load; hf: a transformers model with its "
        "modeling file and tokenizer",
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
    if args.cache is not None:
        raise UserError(
            f"--cache {args.cache}: an export in fixedfirst's format serves every cache "
            "strategy; choose one when serving it (fixedfirst generate DIR --cache ...), or "
            "export with --format hf to set the transformers model's default"
        )
    from fixedfirst.export.writer import export_run
    from fixedfirst.runs.checkpoint import CheckpointManager
    from fixedfirst.runs.directory import RunDir

    config = export_run(args.run_dir, args.out, args.checkpoint)
    source = config["source"]
    tokenizer = config["tokenizer"]
    kind = "no tokenizer" if tokenizer is None else f"{tokenizer['kind']} tokenizer"
    print(
        f"exported {source['run']} step {source['step']} ({source['schedule']}, {kind}, "
        f"default depth {config['default_depth']}) to {args.out}"
    )
    print(f"load it with: fixedfirst.load({str(args.out)!r})")
    newest = CheckpointManager(RunDir(args.run_dir).checkpoints_path).all()
    if newest and newest[-1].step > source["step"]:
        why = (
            "as asked with --checkpoint"
            if args.checkpoint is not None
            else "the newer ones failed their checks (see the warnings above)"
        )
        print(
            f"note: exported step {source['step']}, not the newest checkpoint "
            f"(step {newest[-1].step}): {why}",
            file=sys.stderr,
        )
    return 0


def run_hf(args: argparse.Namespace) -> int:
    from fixedfirst.export.hf import export_hf
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
