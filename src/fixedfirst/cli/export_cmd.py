"""`fixedfirst export`: one checkpoint of a run as weights + config.json + tokenizer files."""

from __future__ import annotations

import argparse


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN", help="a run directory written by train")
    parser.add_argument("--out", required=True, metavar="DIR", help="a new (or empty) directory")
    parser.add_argument("--checkpoint", type=int, metavar="STEP", help="default: the newest")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fixedfirst.serve.export import export_run

    config = export_run(args.run_dir, args.out, args.checkpoint)
    source = config["source"]
    tokenizer = config["tokenizer"]
    kind = "no tokenizer" if tokenizer is None else f"{tokenizer['kind']} tokenizer"
    print(
        f"exported {source['run']} step {source['step']} ({source['schedule']}, {kind}, "
        f"default depth {config['default_depth']}) to {args.out}"
    )
    print(f"load it with: fixedfirst.load({str(args.out)!r})")
    return 0
