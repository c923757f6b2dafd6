"""`fixedfirst prepare`: tokenize text into the token shards that `[data] kind = "tokens"` reads."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Literal

from fixedfirst.data.prepare import (
    DEFAULT_BATCH_BYTES,
    DEFAULT_SHARD_TOKENS,
    PrepareOptions,
    prepare,
)
from fixedfirst.train.interrupt import TrainingInterrupted

EPILOG = """\
inputs:
  FILE.txt (or any other name)  UTF-8 text; one document per file, or split at --separator lines
  FILE.jsonl / .ndjson / .json  one JSON object per line, the text in --text-field
  FILE.parquet                  the text in column --text-field
  DIRECTORY                     every file below it, in sorted order, links to directories
                                followed (hidden files, prepared data skipped, and said)
  a pipe, <(zcat FILE.gz)       read once; Parquet, JSON lines or text by its first bytes
  hf:NAME[:CONFIG]              the train split of a Hugging Face dataset (needs the network
                                and `pip install datasets`),
                                e.g. hf:HuggingFaceFW/fineweb-edu:sample-10BT

examples:
  fixedfirst prepare corpus/ --out data/corpus-byte
  fixedfirst prepare a.jsonl b.parquet --out data/ab-bpe --tokenizer bpe --vocab-size 8192
  fixedfirst prepare fortunes/* --separator % --out data/fortunes-byte
  fixedfirst prepare corpus/ --out data/corpus-inkling --tokenizer checkpoints/inkling
"""


def register(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="files, directories, hf:NAME")
    parser.add_argument("--out", required=True, metavar="DATA", help="the data directory to write")
    parser.add_argument(
        "--tokenizer",
        default="byte",
        metavar="byte|bpe|CHECKPOINT",
        help="byte: UTF-8 bytes + end-of-document, 257 ids, needs nothing (default); "
        "bpe: byte-level BPE trained here on the training split; a checkpoint directory (any "
        "other value; ./bpe for a directory of that name): that checkpoint's own tokenizer, "
        "for a run that starts from it (docs/guides/checkpoints.md)",
    )
    parser.add_argument(
        "--vocab-size", type=int, metavar="N", help="BPE vocabulary size (required for bpe)"
    )
    parser.add_argument(
        "--val-fraction",
        type=float,
        metavar="F",
        help="fraction of the text (bytes) held out for validation, in whole documents, to "
        "within one document (default: 1%%, raised for a corpus under 1.6 MB to 16 KB / its "
        "size, at most 10%%); with too few documents to hold out whole ones, the last F of "
        "each document's text",
    )
    parser.add_argument(
        "--separator",
        metavar="LINE",
        help="plain text: a line equal to LINE ends a document ('%%' for fortune files, '' for "
        "blank lines); default: each file is one document",
    )
    parser.add_argument(
        "--text-field",
        default="text",
        metavar="NAME",
        help="JSONL field / Parquet or dataset column holding the text (default %(default)s)",
    )
    parser.add_argument(
        "--dtype",
        choices=["auto", "uint16", "uint32"],
        default="auto",
        help="token shard dtype; auto: uint16 when the vocabulary fits 65536 ids (default)",
    )
    parser.add_argument(
        "--shard-tokens",
        type=int,
        default=DEFAULT_SHARD_TOKENS,
        metavar="N",
        help="tokens per shard file (default %(default)s)",
    )
    parser.add_argument(
        "--batch-mb",
        type=float,
        default=DEFAULT_BATCH_BYTES / 2**20,
        metavar="MB",
        help="text handed to the tokenizer at once (default %(default)g): prepare's memory grows "
        "with it, not with the size of a file; it never changes what is written",
    )
    parser.set_defaults(run=run)


class PrepareStopped(TrainingInterrupted):
    """`prepare` stopped by SIGTERM: what it wrote is removed; the exit status is a shell's
    for a command killed by it (128 + 15), there being nothing to resume."""

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


@contextlib.contextmanager
def stopped_by_sigterm(out: str) -> Iterator[None]:
    """SIGTERM raises `PrepareStopped`, so the staging directory is removed on the way out,
    as after Ctrl-C, and the command says so instead of dying silently."""

    def stop(signum: int, frame: FrameType | None) -> None:
        raise PrepareStopped(f"nothing written to --out {out}; run the command again", signum)

    before = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def short_for_default_eval(val: dict) -> str | None:
    """What to do when the validation split holds fewer sequences than an evaluation at the
    default settings scores (training on it would be refused); None when it holds enough."""
    from fixedfirst.config import EvalConfig, TrainConfig

    train, batches = TrainConfig(), EvalConfig().batches
    needed = batches * train.micro_batch()
    held = sum(max(0, (shard["tokens"] - 1) // train.seq_len) for shard in val["shards"])
    if held >= needed:
        return None
    return (
        f"the validation split holds {held} sequences of train.seq_len + 1 = "
        f"{train.seq_len + 1} tokens, fewer than the {needed} an evaluation scores at the "
        f"defaults (eval.batches = {batches} of {train.micro_batch()}); prepare it with a larger "
        "--val-fraction, or train with a smaller eval.batches"
    )


def tokenizer_choice(value: str) -> tuple[Literal["byte", "bpe", "checkpoint"], str | None]:
    """--tokenizer: a kind (byte, bpe), or the checkpoint directory whose tokenizer to use."""
    from fixedfirst.errors import UserError

    if value in ("byte", "bpe"):
        return ("byte" if value == "byte" else "bpe"), None
    if not value.strip() or not Path(value).is_dir():
        raise UserError(
            f"--tokenizer {value!r}: expected byte, bpe or a checkpoint directory (whose own "
            "tokenizer to use), and there is no such directory"
        )
    return "checkpoint", value


def run(args: argparse.Namespace) -> int:
    kind, checkpoint = tokenizer_choice(args.tokenizer)
    options = PrepareOptions(
        tokenizer=kind,
        checkpoint=checkpoint,
        vocab_size=args.vocab_size,
        val_fraction=args.val_fraction,
        separator=args.separator,
        text_field=args.text_field,
        dtype=args.dtype,
        shard_tokens=args.shard_tokens,
    )
    with stopped_by_sigterm(args.out):
        result = prepare(
            args.inputs,
            args.out,
            options,
            progress=sys.stderr.isatty(),
            batch_bytes=round(args.batch_mb * 2**20),
        )
    meta = result.meta
    if result.already_done:
        print(f"{result.out}: already holds this data (same inputs and options); nothing to do")
        for note in result.notes:
            print(f"  note: {note}")
        return 0
    train, val = meta["splits"]["train"], meta["splits"]["val"]
    text_bytes = train["bytes"] + val["bytes"]
    tokenizer = meta["tokenizer"]
    print(f"wrote {result.out}")
    print(
        f"  inputs: {len(meta['sources'])} ({text_bytes / 1e6:.2f} MB of text, "
        f"{train['documents'] + val['documents']:,} documents)"
    )
    print(
        f"  tokenizer: {tokenizer['kind']}, vocab {tokenizer['vocab_size']}, "
        f"{meta['tokens_per_byte']:.3f} tokens per byte; shards: {meta['dtype']}"
    )
    for name, split in (("train", train), ("val", val)):
        print(
            f"  {name}: {split['tokens']:,} tokens, {split['documents']:,} documents, "
            f"{len(split['shards'])} shard(s)"
        )
    fraction = meta["options"]["val_fraction"]
    if meta.get("split") == "bytes":
        held = (
            f"the last {fraction:.0%} of each document's text (too few documents to hold "
            "out whole ones)"
        )
    else:
        held = "whole documents, spread over the corpus"
    print(
        f"  validation: {val['bytes'] / text_bytes:.2%} of the text, {val['bytes'] / 1024:,.1f} "
        f"KB ({fraction:.2%} asked; {val['tokens'] / (train['tokens'] + val['tokens']):.2%} of "
        f"the tokens), {held}"
    )
    for note in result.notes:
        print(f"  note: {note}")
    short = short_for_default_eval(val)
    if short:
        print(f"  note: {short}")
    if options.checkpoint is not None:
        print(
            f"  use it with: fixedfirst finish {options.checkpoint} --data {result.out} "
            "--out DIR --tokens N (or [data] path of a run whose [model] checkpoint is it)"
        )
        return 0
    print(
        f'  use it with: [data] kind = "tokens", path = "{result.out}"; '
        f"[model] vocab_size >= {meta['vocab_size']}"
    )
    return 0
