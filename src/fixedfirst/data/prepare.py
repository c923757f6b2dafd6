"""Tokenize a corpus once into token shards, a validation split and a saved tokenizer.

Training then reads the shards through memory maps (tokens.py) and never touches text again.
The steps:

1. Resolve every input and check every option before any work, so a typo costs nothing.
2. Fingerprint the inputs' content and the options. If DATA already holds data with the same
   fingerprint, there is nothing to do; if it holds anything else, stop: nothing is overwritten.
3. Split by documents, or for a corpus of too few documents, by bytes (split.py says how, and
   how the validation fraction is chosen when none is given).
4. BPE only: learn the merges from the training documents (validation text stays unseen).
5. Tokenize, append an end-of-document token to every document, and stream the ids into shards.
6. Everything is written into a temporary directory beside DATA and renamed to DATA at the end,
   so an interrupted run never leaves half a dataset under the name DATA.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

from fixedfirst.data.documents import DocumentInput, resolve_inputs
from fixedfirst.data.prepared import FORMAT, FORMAT_VERSION, META_FILE, SPLITS
from fixedfirst.data.shards import (
    CheckedShard,
    ShardChanged,
    ShardWriter,
    dtype_for_vocab,
    open_shard,
)
from fixedfirst.data.split import DEFAULT_FRACTION, auto_fraction, split_documents
from fixedfirst.data.tokenizer import (
    TOKENIZER_DIR,
    BpeTokenizer,
    ByteTokenizer,
    Tokenizer,
)
from fixedfirst.errors import UserError
from fixedfirst.files.writing import write_error

DEFAULT_SHARD_TOKENS = 100_000_000
"""Tokens per shard: 200 MB as uint16, few enough files for a FineWeb-sized corpus, small enough
to write in one piece."""
MIN_SHARD_TOKENS = 100
MAX_SHARDS = 10_000
"""Shard files per split at most: past that, --shard-tokens is surely a slip."""
ENCODE_BATCH_BYTES = 4 << 20
"""Text gathered before one call to the tokenizer (BPE encodes a batch in parallel)."""


@dataclass(frozen=True)
class PrepareOptions:
    """Everything besides the inputs that decides what `prepare` writes."""

    tokenizer: Literal["byte", "bpe"] = "byte"
    vocab_size: int | None = None
    """BPE only: the vocabulary size to train (the byte tokenizer's is always 257)."""
    val_fraction: float | None = DEFAULT_FRACTION
    """Fraction of the documents held out for validation; None: chosen from the input's size
    (see split.py)."""
    separator: str | None = None
    """Plain text only: a line equal to this ends a document; None = one document per file."""
    text_field: str = "text"
    """JSONL field / Parquet and dataset column that holds the text."""
    dtype: Literal["auto", "uint16", "uint32"] = "auto"
    shard_tokens: int = DEFAULT_SHARD_TOKENS

    def check(self) -> None:
        if self.tokenizer not in ("byte", "bpe"):
            raise UserError(f"--tokenizer {self.tokenizer!r}: expected byte or bpe")
        if self.tokenizer == "byte" and self.vocab_size is not None:
            raise UserError("--vocab-size applies to --tokenizer bpe only (byte-level has 257)")
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
        # Refuse a vocabulary the shards cannot hold now, not after training a tokenizer.
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


def _documents(inputs: list[DocumentInput], desc: str, progress: bool) -> Iterator[str]:
    """Every document of every input, in order, with a progress bar over the input bytes."""
    known = [i.nbytes for i in inputs if i.nbytes is not None]
    total = sum(known) if len(known) == len(inputs) else None
    with _progress(total, desc, progress) as bar:
        for source in inputs:
            shown = 0
            for text in source.documents():
                size = len(text)  # characters: cheap, and close enough to bytes for a progress bar
                if source.nbytes is None or shown + size <= source.nbytes:
                    bar.update(size)
                    shown += size
                yield text
            if source.nbytes is not None:
                bar.update(source.nbytes - shown)  # file overhead: markup, separators, columns


def fingerprint(inputs: list[DocumentInput], digests: list[str], options: PrepareOptions) -> str:
    """A digest of what `prepare` would write: the inputs' content digests, their order and
    formats, the options, and the data format version (not the paths: moving the corpus does not
    change the data)."""
    digest = hashlib.sha256()
    digest.update(json.dumps([FORMAT, FORMAT_VERSION, asdict(options)]).encode())
    for source, content in zip(inputs, digests, strict=True):
        digest.update(json.dumps([source.format, content]).encode())
    return digest.hexdigest()


def _check_out(out: Path, fp: str) -> dict[str, Any] | None:
    """The existing meta.json when DATA already holds this exact data; None when DATA is free
    (absent, or an empty directory); an error when it holds anything else."""
    if not out.exists():
        return None
    if not out.is_dir():
        raise UserError(f"--out {out}: exists and is not a directory; nothing overwritten")
    meta_file = out / META_FILE
    if meta_file.is_file():
        try:
            existing = json.loads(meta_file.read_text())
        except (OSError, ValueError):
            existing = {}
        if isinstance(existing, dict) and existing.get("fingerprint") == fp:
            _check_shards(out, existing)
            return existing
        raise UserError(
            f"--out {out}: already holds prepared data from other inputs or options; "
            "nothing overwritten (choose another --out, or delete it first)"
        )
    if any(out.iterdir()):
        raise UserError(
            f"--out {out}: exists, is not empty and holds no prepared data; nothing overwritten"
        )
    return None


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


def _train_bpe(
    inputs: list[DocumentInput], options: PrepareOptions, by_bytes: bool, progress: bool
) -> Tokenizer:
    fraction = options.val_fraction
    assert fraction is not None  # resolved by prepare()

    def training_documents() -> Iterator[str]:
        documents = _documents(inputs, "training BPE", progress)
        for split, text in split_documents(documents, fraction, by_bytes):
            if split == "train":
                yield text

    assert options.vocab_size is not None
    return BpeTokenizer.train(training_documents(), options.vocab_size)


def _write_splits(
    tmp: Path,
    inputs: list[DocumentInput],
    tokenizer: Tokenizer,
    options: PrepareOptions,
    by_bytes: bool,
    progress: bool,
) -> dict[str, dict[str, Any]]:
    """Tokenize every document into the train or val shards; the per-split counts."""
    assert options.val_fraction is not None  # resolved by prepare()
    dtype = dtype_for_vocab(tokenizer.vocab_size, options.dtype)
    writers = {s: ShardWriter(tmp, s, dtype, options.shard_tokens) for s in SPLITS}
    stats = {s: {"documents": 0, "bytes": 0} for s in SPLITS}
    pending: dict[str, list[str]] = {s: [] for s in SPLITS}
    pending_bytes = dict.fromkeys(SPLITS, 0)

    def flush(split: str) -> None:
        writers[split].add(tokenizer.encode_documents(pending[split]))
        pending[split].clear()
        pending_bytes[split] = 0

    documents = _documents(inputs, "tokenizing", progress)
    for split, text in split_documents(documents, options.val_fraction, by_bytes):
        size = len(text.encode("utf-8"))
        stats[split]["documents"] += 1
        stats[split]["bytes"] += size
        pending[split].append(text)
        pending_bytes[split] += size
        if pending_bytes[split] >= ENCODE_BATCH_BYTES:
            flush(split)
    for split in SPLITS:
        flush(split)
    return {
        split: {
            **stats[split],
            "tokens": writers[split].total_tokens,
            "shards": writers[split].close(),
        }
        for split in SPLITS
    }


def _check_splits(
    splits: dict[str, dict[str, Any]], inputs: list[DocumentInput], f: float, by_bytes: bool
) -> None:
    documents = sum(s["documents"] for s in splits.values())
    if documents == 0:
        names = ", ".join(i.name for i in inputs[:3]) + (" ..." if len(inputs) > 3 else "")
        raise UserError(f"empty input: no text in {names or 'the given directories'}")
    for split in SPLITS:
        if splits[split]["documents"] == 0 and by_bytes:  # the end of each document held out
            text = sum(s["bytes"] for s in splits.values())
            raise UserError(
                f"{text} bytes of text are too little to split into training and validation "
                "text (each part needs words of its own, and a document is cut only at a "
                "space); add text"
            )
        if splits[split]["documents"] == 0:
            raise UserError(
                f"the {split} split is empty: {documents} documents with --val-fraction {f} "
                "leave none for it; lower --val-fraction or add documents"
            )


def prepare(
    specs: list[str], out: str | Path, options: PrepareOptions, progress: bool = False
) -> PrepareResult:
    """Tokenize the inputs named by `specs` into the DATA directory `out`."""
    out = Path(out)
    options.check()
    inputs = resolve_inputs(specs, options.separator, options.text_field)
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
    fp = fingerprint(inputs, digests, options)
    existing = _check_out(out, fp)
    if existing is not None:
        return PrepareResult(out, existing, already_done=True)

    tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        return _write(out, tmp, inputs, digests, fp, options, progress)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise write_error(out, e) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _write(
    out: Path,
    tmp: Path,
    inputs: list[DocumentInput],
    digests: list[str],
    fp: str,
    options: PrepareOptions,
    progress: bool,
) -> PrepareResult:
    """Tokenize into `tmp`, then rename it to `out`: by documents, or (too few of them to
    hold any out, or just one) by bytes."""
    fraction = options.val_fraction
    assert fraction is not None  # resolved by prepare()
    for by_bytes in (False, True):
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        if options.tokenizer == "bpe":
            tokenizer = _train_bpe(inputs, options, by_bytes, progress)
        else:
            tokenizer = ByteTokenizer()
        splits = _write_splits(tmp, inputs, tokenizer, options, by_bytes, progress)
        # By bytes when no document was held out, or the whole corpus is one document.
        documents = sum(split["documents"] for split in splits.values())
        if documents != 1 and (splits["val"]["documents"] or not documents):
            break
    _check_splits(splits, inputs, fraction, by_bytes)
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
        "split": "bytes" if by_bytes else "documents",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "fixedfirst_version": __version__,
    }
    (tmp / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    if out.exists():  # an empty directory (checked above): replace it
        out.rmdir()
    try:
        os.rename(tmp, out)
    except OSError:
        raise UserError(
            f"--out {out}: was created by someone else while preparing; nothing overwritten"
        ) from None
    return PrepareResult(out, meta, already_done=False)
