"""Tokenize a corpus once into token shards, a validation split and a saved tokenizer.

Training then reads the shards through memory maps (tokens.py) and never touches text again.
The steps:

1. Resolve every input and check every option before any work, so a typo costs nothing.
2. Fingerprint the inputs' content and the options (an input that can be read only once, a
   pipe, is copied first: data/inputs.py). If DATA already holds data with the same fingerprint,
   there is nothing to do; if it holds anything else, stop: nothing is overwritten.
3. Split by documents, or for a corpus of too few documents, within each one (split.py says how,
   and how the validation fraction is chosen when none is given).
4. BPE only: learn the merges from the training text (validation text stays unseen).
5. Tokenize, append an end-of-document token to every document, and stream the ids into shards.
6. Everything is written into a staging directory beside DATA and renamed to DATA at the end
   (staging.py), so an interrupted run never leaves half a dataset under the name DATA.

Memory: text reaches the tokenizer in pieces (pieces.py), `batch_bytes` of them per call, and
token ids go straight to the shard files, so what `prepare` holds grows with `batch_bytes`, not
with the size of a file or of the corpus (benchmarks/prepare_memory.py measures it). BPE
training also counts every distinct word of the training text, which grows with the corpus's
vocabulary (the `tokenizers` library's own memory).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from fixedfirst.data.documents import DocumentInput, TextFile
from fixedfirst.data.inputs import check_out_of_inputs, copy_pipes, resolve_inputs
from fixedfirst.data.pieces import Piece
from fixedfirst.data.prepared import FORMAT, FORMAT_VERSION, META_FILE, SPLITS
from fixedfirst.data.shards import (
    CheckedShard,
    ShardChanged,
    ShardWriter,
    dtype_for_vocab,
    open_shard,
)
from fixedfirst.data.split import DEFAULT_FRACTION, Split, auto_fraction
from fixedfirst.data.staging import Staging
from fixedfirst.data.tokenizer import (
    TOKENIZER_DIR,
    BpeTokenizer,
    ByteTokenizer,
    CheckpointTokenizer,
    Tokenizer,
    checkpoint_tokenizer,
)
from fixedfirst.errors import UserError
from fixedfirst.files.writing import write_error

DEFAULT_SHARD_TOKENS = 100_000_000
"""Tokens per shard: 200 MB as uint16, few enough files for a FineWeb-sized corpus, small enough
to write in one piece."""
MIN_SHARD_TOKENS = 100
MAX_SHARDS = 10_000
"""Shard files per split at most: past that, --shard-tokens is surely a slip."""
DEFAULT_BATCH_BYTES = 1 << 20
"""Text handed to the tokenizer per call (BPE encodes a call's pieces in parallel): a BPE call
holds about a hundred times as much memory (docs/guides/own-data.md)."""
SPLIT_NAMES = {"documents": "whole documents", "bytes": "the end of each document"}


@dataclass(frozen=True)
class PrepareOptions:
    """Everything besides the inputs that decides what `prepare` writes."""

    tokenizer: Literal["byte", "bpe", "checkpoint"] = "byte"
    vocab_size: int | None = None
    """BPE only: the vocabulary size to train (the byte tokenizer's is always 257)."""
    checkpoint: str | None = None
    """`checkpoint` only: the checkpoint directory whose own tokenizer to use (a run from that
    checkpoint trains on this data)."""
    val_fraction: float | None = DEFAULT_FRACTION
    """Fraction of the text (in bytes, in whole documents) held out for validation; None:
    chosen from the input's size (see split.py)."""
    separator: str | None = None
    """Plain text only: a line equal to this ends a document; None = one document per file."""
    text_field: str = "text"
    """JSONL field / Parquet and dataset column that holds the text."""
    dtype: Literal["auto", "uint16", "uint32"] = "auto"
    shard_tokens: int = DEFAULT_SHARD_TOKENS

    def check(self) -> None:
        if self.tokenizer not in ("byte", "bpe", "checkpoint"):
            raise UserError(
                f"--tokenizer {self.tokenizer!r}: expected byte, bpe or a checkpoint directory"
            )
        if (self.tokenizer == "checkpoint") != (self.checkpoint is not None):
            raise UserError("a checkpoint's tokenizer needs its directory, and only it does")
        if self.tokenizer == "byte" and self.vocab_size is not None:
            raise UserError("--vocab-size applies to --tokenizer bpe only (byte-level has 257)")
        if self.tokenizer == "checkpoint" and self.vocab_size is not None:
            raise UserError(
                "--vocab-size applies to --tokenizer bpe only (a checkpoint's tokenizer has its "
                "own vocabulary)"
            )
        if self.tokenizer == "bpe":
            if self.vocab_size is None:
                raise UserError("--tokenizer bpe needs --vocab-size N (e.g. 2048)")
            if self.vocab_size < BpeTokenizer.MIN_VOCAB:
                raise UserError(
                    f"--vocab-size {self.vocab_size}: byte-level BPE needs at least "
                    f"{BpeTokenizer.MIN_VOCAB} ids (256 bytes + end-of-document)"
                )
        if self.val_fraction is not None and not 0.0 < self.val_fraction < 1.0:
            raise UserError(f"--val-fraction must be in (0, 1), got {self.val_fraction}")
        if self.shard_tokens < MIN_SHARD_TOKENS:
            raise UserError(
                f"--shard-tokens must be >= {MIN_SHARD_TOKENS} (a file per handful of tokens "
                f"helps nobody; the default is {DEFAULT_SHARD_TOKENS:,}), got {self.shard_tokens}"
            )
        # Refuse a vocabulary the shards cannot hold now, not after training a tokenizer (a
        # checkpoint's is checked once it is read).
        if self.tokenizer != "checkpoint":
            dtype_for_vocab(self.planned_vocab_size, self.dtype)

    @property
    def planned_vocab_size(self) -> int:
        if self.tokenizer == "bpe":
            assert self.vocab_size is not None, "check() requires --vocab-size for bpe"
            return self.vocab_size
        return ByteTokenizer().vocab_size


@dataclass
class PrepareResult:
    out: Path
    meta: dict[str, Any]
    already_done: bool
    """True when DATA already held exactly this data and nothing was written."""
    notes: list[str] = field(default_factory=list)
    """What was skipped, followed or kept besides the data itself, one line each."""


def _progress(total: int | None, desc: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=desc,
        unit="B",
        unit_scale=True,
        file=sys.stderr,
        disable=not enabled,
        leave=False,
    )


def _pieces(inputs: list[DocumentInput], desc: str, progress: bool) -> Iterator[Piece]:
    """Every input's pieces, in order, with a progress bar over the input bytes."""
    known = [i.nbytes for i in inputs if i.nbytes is not None]
    total = sum(known) if len(known) == len(inputs) else None
    with _progress(total, desc, progress) as bar:
        for source in inputs:
            shown = 0
            for piece in source.pieces():
                size = len(piece.text)  # characters: cheap, close enough to bytes for a bar
                if source.nbytes is None or shown + size <= source.nbytes:
                    bar.update(size)
                    shown += size
                yield piece
            if source.nbytes is not None:
                bar.update(source.nbytes - shown)  # file overhead: markup, separators, columns


def fingerprint(
    inputs: list[DocumentInput],
    digests: list[str],
    options: PrepareOptions,
    version: int = FORMAT_VERSION,
) -> str:
    """A digest of what `prepare` would write: the inputs' content digests, their order and
    formats, the options, and the data format version (not the paths: moving the corpus does not
    change the data). `version` 1 gives what data prepared before split by bytes recorded."""
    described = asdict(options)
    if described["checkpoint"] is None:  # as data prepared before checkpoints' tokenizers was
        del described["checkpoint"]
    digest = hashlib.sha256()
    digest.update(json.dumps([FORMAT, version, described]).encode())
    for source, content in zip(inputs, digests, strict=True):
        digest.update(json.dumps([source.format, content]).encode())
    return digest.hexdigest()


def _check_out_is_free(out: Path) -> None:
    """Refuse, before any work, an --out that can only be refused: a file, or a non-empty
    directory that holds no prepared data."""
    if not out.exists():
        return
    if not out.is_dir():
        raise UserError(f"--out {out}: exists and is not a directory; nothing overwritten")
    if not (out / META_FILE).is_file() and any(out.iterdir()):
        raise UserError(
            f"--out {out}: exists, is not empty and holds no prepared data; nothing overwritten"
        )


def _existing(out: Path, fp: str, fp_v1: str) -> dict[str, Any] | None:
    """The existing meta.json when DATA already holds this exact data (written by this version,
    or by one before the split by bytes: it keeps its split); None when DATA is free (absent,
    or an empty directory); an error when it holds anything else."""
    meta_file = out / META_FILE
    if not meta_file.is_file():
        return None
    try:
        existing = json.loads(meta_file.read_text())
    except (OSError, ValueError):
        existing = {}
    if isinstance(existing, dict) and existing.get("fingerprint") in (fp, fp_v1):
        _check_shards(out, existing)
        return existing
    raise UserError(
        f"--out {out}: already holds prepared data from other inputs or options; "
        "nothing overwritten (choose another --out, or delete it first)"
    )


def _check_shards(out: Path, meta: dict[str, Any]) -> None:
    """Refuse to call DATA done when a shard of it changed since it was written: preparing
    again into it would change nothing, and the message says what would."""
    for split in SPLITS:
        for entry in meta["splits"][split]["shards"]:
            path = out / entry["file"]
            try:
                CheckedShard(path, open_shard(path), entry.get("blocks")).verify_all()
            except ShardChanged as e:
                raise UserError(
                    f"--out {out}: holds this data, but tokens {e.first:,}..{e.last:,} of "
                    f"{entry['file']} changed since it was prepared (CRC-32 mismatch); nothing "
                    f"overwritten: delete {out} (or choose another --out) and prepare again"
                ) from None


def _check_separator(inputs: list[DocumentInput], options: PrepareOptions) -> None:
    """Refuse --separator when no input is plain text: it would be silently ignored."""
    if options.separator is None or any(isinstance(i, TextFile) for i in inputs):
        return
    formats = sorted({i.format for i in inputs})
    raise UserError(
        f"--separator {options.separator!r} applies to plain text files, and every input is "
        f"{' or '.join(formats)} (one document per record); leave --separator out"
    )


def prepare(
    specs: list[str],
    out: str | Path,
    options: PrepareOptions,
    progress: bool = False,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
) -> PrepareResult:
    """Tokenize the inputs named by `specs` into the DATA directory `out`, handing the
    tokenizer `batch_bytes` of text at a time (what bounds the memory it takes)."""
    out = Path(out)
    options.check()
    if batch_bytes < 1:
        raise UserError(f"--batch-mb must be > 0, got {batch_bytes / 2**20:g}")
    given = None
    if options.checkpoint is not None:
        given = checkpoint_tokenizer(options.checkpoint)
        dtype_for_vocab(given.vocab_size, options.dtype)
    named = resolve_inputs(specs, options.separator, options.text_field)
    check_out_of_inputs(out, named)
    _check_out_is_free(out)
    try:
        with Staging(out) as staging:
            inputs = copy_pipes(named, staging.scratch, options.separator, options.text_field)
            return _prepare(inputs, named.notes, staging, options, given, progress, batch_bytes)
    except OSError as e:
        raise write_error(out, e) from None


def _prepare(
    inputs: list[DocumentInput],
    notes: list[str],
    staging: Staging,
    options: PrepareOptions,
    given: CheckpointTokenizer | None,
    progress: bool,
    batch_bytes: int,
) -> PrepareResult:
    out = staging.out
    _check_separator(inputs, options)
    known = [i.nbytes for i in inputs if i.nbytes is not None]
    total = sum(known) if len(known) == len(inputs) else None
    if options.val_fraction is None:
        options = replace(options, val_fraction=auto_fraction(total))
    if total is not None and total / options.shard_tokens > MAX_SHARDS:
        raise UserError(
            f"--shard-tokens {options.shard_tokens:,} would write about "
            f"{total // options.shard_tokens:,} shard files for {total:,} bytes of input (at "
            f"most {MAX_SHARDS:,}); raise --shard-tokens (default {DEFAULT_SHARD_TOKENS:,})"
        )
    digests = [source.fingerprint() for source in inputs]
    # A checkpoint's tokenizer counts by what it is, not by where it was read from.
    keyed = options if given is None else replace(options, checkpoint=given.fingerprint)
    fp = fingerprint(inputs, digests, keyed)
    existing = _existing(out, fp, fingerprint(inputs, digests, keyed, version=1))
    if existing is not None:
        if existing.get("format_version") == 1:
            notes.append(
                "kept as prepared by an earlier fixedfirst (format 1: a fraction of the "
                "documents held out, whatever their sizes); delete it and prepare again for "
                "the split by bytes"
            )
        return PrepareResult(out, existing, already_done=True, notes=notes)
    meta = _write(staging.path, inputs, digests, fp, options, given, progress, batch_bytes)
    staging.publish()
    return PrepareResult(out, meta, already_done=False, notes=notes)


def _train_bpe(
    inputs: list[DocumentInput], split: Split, vocab_size: int, progress: bool
) -> Tokenizer:
    def training_text() -> Iterator[str]:
        for part, piece in split(_pieces(inputs, "training BPE", progress)):
            if part == "train":
                yield piece.text

    return BpeTokenizer.train(training_text(), vocab_size)


def _write_splits(
    tmp: Path,
    inputs: list[DocumentInput],
    tokenizer: Tokenizer,
    split: Split,
    options: PrepareOptions,
    progress: bool,
    batch_bytes: int,
) -> dict[str, dict[str, Any]]:
    """Tokenize every piece into the train or val shards; the per-split counts."""
    dtype = dtype_for_vocab(tokenizer.vocab_size, options.dtype)
    writers = {s: ShardWriter(tmp, s, dtype, options.shard_tokens) for s in SPLITS}
    stats = {s: {"documents": 0, "bytes": 0} for s in SPLITS}
    pending: dict[str, list[Piece]] = {s: [] for s in SPLITS}
    pending_bytes = dict.fromkeys(SPLITS, 0)

    def flush(part: str) -> None:
        texts, ends = [p.text for p in pending[part]], [p.last for p in pending[part]]
        writers[part].add(tokenizer.encode_documents(texts, ends))
        pending[part].clear()
        pending_bytes[part] = 0

    for part, piece in split(_pieces(inputs, "tokenizing", progress)):
        size = len(piece.text.encode("utf-8"))
        stats[part]["documents"] += piece.last
        stats[part]["bytes"] += size
        pending[part].append(piece)
        pending_bytes[part] += size
        if pending_bytes[part] >= batch_bytes:
            flush(part)
    for part in SPLITS:
        flush(part)
    return {
        part: {
            **stats[part],
            "tokens": writers[part].total_tokens,
            "shards": writers[part].close(),
        }
        for part in SPLITS
    }


def _check_splits(
    splits: dict[str, dict[str, Any]], inputs: list[DocumentInput], f: float, within: bool
) -> None:
    documents = sum(s["documents"] for s in splits.values())
    if documents == 0:
        names = ", ".join(i.name for i in inputs[:3]) + (" ..." if len(inputs) > 3 else "")
        raise UserError(f"empty input: no text in {names or 'the given directories'}")
    for part in SPLITS:
        if splits[part]["documents"] == 0 and within:  # the end of each document held out
            text = sum(s["bytes"] for s in splits.values())
            raise UserError(
                f"{text} bytes of text are too little to split into training and validation "
                "text (each part needs words of its own, and a document is cut only at a "
                "space); add text"
            )
        if splits[part]["documents"] == 0:
            raise UserError(
                f"the {part} split is empty: {documents} documents with --val-fraction {f} "
                "leave none for it; lower --val-fraction or add documents"
            )


def _write(
    tmp: Path,
    inputs: list[DocumentInput],
    digests: list[str],
    fp: str,
    options: PrepareOptions,
    given: Tokenizer | None,
    progress: bool,
    batch_bytes: int,
) -> dict[str, Any]:
    """Tokenize into `tmp`: by documents, or (none of them held out) within each document;
    meta.json last. The meta it wrote."""
    fraction = options.val_fraction
    assert fraction is not None  # resolved by prepare()
    split = Split(fraction)
    while True:
        if options.tokenizer == "bpe":
            assert options.vocab_size is not None
            tokenizer: Tokenizer = _train_bpe(inputs, split, options.vocab_size, progress)
        elif given is not None:
            tokenizer = given
        else:
            tokenizer = ByteTokenizer()
        if not split.holds_out_nothing():
            for stale in tmp.glob("*.bin"):  # a pass by documents that held out none
                stale.unlink()
            splits = _write_splits(tmp, inputs, tokenizer, split, options, progress, batch_bytes)
        if not split.holds_out_nothing():
            break
        split = split.within_documents()
    _check_splits(splits, inputs, fraction, split.within)
    tokenizer.save(tmp / TOKENIZER_DIR)
    text_bytes = sum(s["bytes"] for s in splits.values())
    text_tokens = sum(s["tokens"] - s["documents"] for s in splits.values())
    from fixedfirst import __version__

    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "fingerprint": fp,
        "tokenizer": tokenizer.description(),
        "vocab_size": tokenizer.vocab_size,
        "dtype": dtype_for_vocab(tokenizer.vocab_size, options.dtype).name,
        "splits": splits,
        "tokens_per_byte": text_tokens / text_bytes,
        "sources": [i.describe() | {"digest": d} for i, d in zip(inputs, digests, strict=True)],
        "options": asdict(options),
        "split": "bytes" if split.within else "documents",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "fixedfirst_version": __version__,
    }
    (tmp / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    return meta
