"""A prepared DATA directory: its layout, and reading its meta.json.

Everything that reads DATA goes through `read_meta`, so a missing or unprepared directory is one
clear error that says how to make it. The layout and meta.json's keys are in
docs/reference/files.md.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fixedfirst.config import DataConfig, RunConfig
from fixedfirst.errors import UserError
from fixedfirst.files.paths import shown

META_FILE = "meta.json"
FORMAT = "fixedfirst-tokens"
FORMAT_VERSION = 2
"""2: the validation split holds out a fraction of the bytes (data/split.py); 1: a fraction of
the documents. Both are read alike: data prepared before keep the split they were made with."""
READABLE_VERSIONS = (1, 2)
SPLITS = ("train", "val")


def how_to_prepare(path: str | Path) -> str:
    return f"make it with `fixedfirst prepare INPUT... --out {shown(path)}`"


def read_meta(path: str | Path) -> dict[str, Any]:
    """The meta.json of a prepared DATA directory, checked to be one this version can read."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        parent = f" (its directory {shown(path.parent)}?)" if path.name == META_FILE else ""
        raise UserError(
            f"{shown(path)} is a file; the data path names the directory that `fixedfirst "
            f"prepare INPUT... --out DIR` wrote{parent}"
        )
    if not path.is_dir():
        expanded = os.path.expandvars(str(path))
        if expanded != str(path):  # "$HOME/data" in a configuration
            raise UserError(
                f"{shown(path)}: no such data directory; a configuration does not expand "
                f"environment variables: write the path itself ({shown(expanded)}), or one "
                "relative to the configuration file"
            )
        raise UserError(f"{shown(path)}: no such data directory; {how_to_prepare(path)}")
    meta_file = path / META_FILE
    if not meta_file.is_file():
        raise UserError(
            f"{shown(path)}: not a prepared data directory (no {META_FILE}); {how_to_prepare(path)}"
        )
    try:
        meta = json.loads(meta_file.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{shown(meta_file)}: unreadable ({e}); {how_to_prepare(path)}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise UserError(
            f"{shown(meta_file)}: not written by `fixedfirst prepare`; {how_to_prepare(path)}"
        )
    if meta.get("format_version") not in READABLE_VERSIONS:
        raise UserError(
            f"{shown(meta_file)}: data format version {meta.get('format_version')}, this "
            f"fixedfirst reads versions {', '.join(map(str, READABLE_VERSIONS))}; prepare the "
            "data again"
        )
    return meta


def is_prepared(path: str | Path) -> bool:
    """Whether `path` is a directory `fixedfirst prepare` wrote (its meta.json says so)."""
    try:
        meta = json.loads((Path(path) / META_FILE).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("format") == FORMAT


def data_vocab_size(path: str | Path) -> int:
    """The vocabulary size of the data in DATA: a model trained on it needs at least this many
    ids (`model.vocab_size`)."""
    return int(read_meta(path)["vocab_size"])


def check_model_vocab(model_vocab_size: int, path: str | Path) -> None:
    """Refuse a model whose embedding cannot hold every token id in the data."""
    meta = read_meta(path)
    needed = int(meta["vocab_size"])
    if model_vocab_size < needed:
        raise UserError(
            f"model.vocab_size = {model_vocab_size} is smaller than the vocabulary of the data "
            f"at {shown(path)} ({needed} ids, {meta['tokenizer']['kind']} tokenizer); "
            f"set model.vocab_size = {needed} (or larger)"
        )


def passes_note(path: str | Path, tokens: int) -> str | None:
    """What a training budget of `tokens` reads of DATA's training split, when that is more than
    one pass: every pass after the first repeats the same text, which a run should mean to do."""
    held = int(read_meta(path)["splits"]["train"]["tokens"])
    if tokens <= held:
        return None
    return (
        f"the budget's {tokens:,} tokens are {tokens / held:.1f} passes over the {held:,} "
        f"training tokens of {shown(path)} (each after the first repeats them); prepare more "
        "text, or lower train.tokens, unless that is meant"
    )


TRAINED_ON = "fixedfirst-trained-on.json"
"""A checkpoint directory's record of the [data] its weights were trained on, where fixedfirst
wrote it from a run of its own (the finishing study's low-rank finishes start from their base's
final weights so): a run from it may train on that same data, whatever its kind."""


def write_trained_on(directory: Path, data: DataConfig) -> None:
    """Record in the checkpoint directory `directory` the [data] its weights were trained on."""
    (directory / TRAINED_ON).write_text(json.dumps({"data": asdict(data)}, indent=2) + "\n")


def trained_on(checkpoint: str) -> dict[str, Any] | None:
    """The [data] a checkpoint directory records its weights were trained on (None: no record,
    a checkpoint trained elsewhere)."""
    try:
        return dict(json.loads((Path(checkpoint) / TRAINED_ON).read_text())["data"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_checkpoint_data(config: RunConfig) -> None:
    """Refuse, for a run that starts from a checkpoint, data that is not text in the
    checkpoint's own tokens: prepared with its tokenizer (`prepare --tokenizer DIR`; matched
    by the tokenizer's fingerprint, not by where it was read from), the synthetic toy language
    of a smoke test (ids the model learns, checked against its vocabulary), or the very data
    its weights were trained on by a run of ours (`TRAINED_ON`)."""
    from fixedfirst.data.tokenizer import CheckpointTokenizer

    checkpoint = config.model.checkpoint
    data = config.data
    if checkpoint is None or data.kind == "synthetic" or trained_on(checkpoint) == asdict(data):
        return
    how = (
        f"prepare it with `fixedfirst prepare INPUT... --tokenizer {shown(checkpoint)} --out DATA`"
    )
    if data.kind != "tokens" or data.path is None:
        raise UserError(
            f"data.kind = {data.kind!r}: a run that starts from a checkpoint trains on text in "
            f'the checkpoint\'s own tokens ([data] kind = "tokens"); {how}'
        )
    described = read_meta(data.path)["tokenizer"]
    own = CheckpointTokenizer.load(checkpoint)
    if described.get("kind") != CheckpointTokenizer.kind:
        raise UserError(
            f"{shown(data.path)} was tokenized by fixedfirst's {described.get('kind')} "
            f"tokenizer, not by the checkpoint's own; {how}"
        )
    if described.get("fingerprint") != own.fingerprint:
        raise UserError(
            f"{shown(data.path)} was tokenized by another checkpoint's tokenizer than "
            f"{shown(checkpoint)}'s (their fingerprints differ); {how}"
        )
