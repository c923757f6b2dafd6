"""Where documents come from: text, JSONL and Parquet files, directories, Hugging Face datasets.

`resolve_inputs` turns the command line's INPUT arguments into `DocumentInput`s before any work
starts, so a missing path or package fails at once and nothing is half done. Each input yields
its documents one at a time (a corpus never has to fit in memory) and fingerprints its content.
Text that is not UTF-8 is an error naming the file and offset, never replaced: a mis-encoded
corpus should be converted, not trained on. The formats are listed in docs/reference/files.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path

from fixedfirst.errors import UserError

JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
PARQUET_SUFFIXES = (".parquet",)
HUB_PREFIX = "hf:"


class DocumentInput(ABC):
    """One input: a file or a hub dataset."""

    name: str
    """How the input is named in messages and in meta.json."""
    format: str
    nbytes: int | None
    """Size on disk (for progress), when known."""

    @abstractmethod
    def documents(self) -> Iterator[str]:
        """The documents, in a fixed order."""

    @abstractmethod
    def fingerprint(self) -> str:
        """A digest of the content (not of the name: moving a file does not change the data)."""

    def describe(self) -> dict:
        return {"input": self.name, "format": self.format, "bytes": self.nbytes}


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror})") from None
    return digest.hexdigest()


def _utf8_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line with its newline) of a UTF-8 text file; errors name the byte offset."""
    offset = 0
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            nul = raw.find(b"\0")
            if nul >= 0:
                raise UserError(
                    f"{path}: a binary file, not text (NUL byte at offset {offset + nul}); "
                    "pass text, JSONL or Parquet files"
                )
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise UserError(
                    f"{path}: not UTF-8 text (byte 0x{raw[e.start]:02x} at line {number}, "
                    f"offset {offset + e.start}); convert it to UTF-8 first"
                ) from None
            offset += len(raw)


class FileInput(DocumentInput):
    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = str(path)
        self.nbytes = path.stat().st_size

    def fingerprint(self) -> str:
        return _file_digest(self.path)


class TextFile(FileInput):
    format = "text"

    def __init__(self, path: Path, separator: str | None) -> None:
        super().__init__(path)
        self.separator = separator

    def documents(self) -> Iterator[str]:
        lines: list[str] = []
        for _, line in _utf8_lines(self.path):
            if self.separator is not None and line.rstrip("\r\n") == self.separator:
                text = "".join(lines)
                lines.clear()
                if text.strip():
                    yield text
            else:
                lines.append(line)
        text = "".join(lines)
        if text.strip():
            yield text


class JsonlFile(FileInput):
    format = "jsonl"

    def __init__(self, path: Path, text_field: str) -> None:
        super().__init__(path)
        self.text_field = text_field

    def documents(self) -> Iterator[str]:
        for number, line in _utf8_lines(self.path):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{self.path}:{number}: not a JSON line ({e.msg})") from None
            if not isinstance(record, dict) or self.text_field not in record:
                keys = sorted(record) if isinstance(record, dict) else type(record).__name__
                raise UserError(
                    f"{self.path}:{number}: no {self.text_field!r} field (found {keys}); "
                    "name the field with --text-field"
                )
            text = record[self.text_field]
            if not isinstance(text, str):
                raise UserError(
                    f"{self.path}:{number}: field {self.text_field!r} is "
                    f"{type(text).__name__}, not a string"
                )
            if text.strip():
                yield text


class ParquetFile(FileInput):
    format = "parquet"

    def __init__(self, path: Path, text_field: str) -> None:
        super().__init__(path)
        self.text_field = text_field
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise UserError(
                f"{path}: reading Parquet needs the `pyarrow` package: "
                "pip install 'fixedfirst[data]' (or pip install pyarrow)"
            ) from None
        try:
            self.file = pq.ParquetFile(path)
        except Exception as e:  # pyarrow raises ArrowInvalid and OSError subclasses
            raise UserError(f"{path}: not a Parquet file ({str(e).splitlines()[0]})") from None
        columns = self.file.schema_arrow.names
        if text_field not in columns:
            raise UserError(
                f"{path}: no {text_field!r} column (found {columns}); name it with --text-field"
            )
        column_type = str(self.file.schema_arrow.field(text_field).type)
        if column_type not in ("string", "large_string"):
            raise UserError(f"{path}: column {text_field!r} holds {column_type}, not strings")

    def documents(self) -> Iterator[str]:
        for batch in self.file.iter_batches(columns=[self.text_field], batch_size=1024):
            for text in batch.column(0).to_pylist():
                if text is not None and text.strip():
                    yield text


@contextlib.contextmanager
def _quiet_logger(name: str) -> Iterator[None]:
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


class HubDataset(DocumentInput):
    """The train split of a Hugging Face dataset, through the `datasets` package."""

    format = "hf"
    nbytes = None

    def __init__(self, spec: str, text_field: str) -> None:
        self.name = spec
        name, _, config = spec[len(HUB_PREFIX) :].partition(":")
        if not name:
            raise UserError(f"{spec}: expected hf:NAME or hf:NAME:CONFIG")
        try:
            import datasets
        except ImportError:
            raise UserError(
                f"{spec}: Hugging Face datasets need the `datasets` package: pip install datasets"
            ) from None
        try:
            # The hub client logs every retry; the failure is reported once, below.
            with _quiet_logger("huggingface_hub"):
                self.dataset = datasets.load_dataset(name, config or None, split="train")
        except Exception as e:  # network, authentication, unknown name: all end the same way
            reason = (str(e).splitlines() or [""])[0][:200]
            raise UserError(
                f"{spec}: could not load it from the Hugging Face hub "
                f"({type(e).__name__}: {reason}); this needs the network (or a datasets cache)"
            ) from None
        if text_field not in self.dataset.column_names:
            raise UserError(
                f"{spec}: no {text_field!r} column (found {self.dataset.column_names}); "
                "name it with --text-field"
            )
        self.text_field = text_field

    def documents(self) -> Iterator[str]:
        for batch in self.dataset.iter(batch_size=1024):
            for text in batch[self.text_field]:
                if text is not None and text.strip():
                    yield text

    def fingerprint(self) -> str:
        # `datasets` fingerprints every dataset by its source files and processing.
        own = getattr(self.dataset, "_fingerprint", None)
        return own or hashlib.sha256(self.name.encode()).hexdigest()


def _file_input(path: Path, separator: str | None, text_field: str) -> DocumentInput:
    suffix = path.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        return JsonlFile(path, text_field)
    if suffix in PARQUET_SUFFIXES:
        return ParquetFile(path, text_field)
    return TextFile(path, separator)


def _directory_files(directory: Path) -> list[Path]:
    """Every regular file below `directory`, sorted, skipping hidden files and directories."""
    return [
        p
        for p in sorted(directory.rglob("*"))
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(directory).parts)
    ]


def resolve_inputs(
    specs: list[str], separator: str | None = None, text_field: str = "text"
) -> list[DocumentInput]:
    """The inputs named on the command line, directories expanded, in a fixed order.

    A file reached twice (named twice, or through a symbolic link) is read once.
    """
    if not specs:
        raise UserError("no INPUT given")
    inputs: list[DocumentInput] = []
    seen: set[Path] = set()
    for spec in specs:
        if spec.startswith(HUB_PREFIX):
            inputs.append(HubDataset(spec, text_field))
            continue
        path = Path(spec)
        if not path.exists():
            raise UserError(f"{spec}: no such file or directory")
        files = _directory_files(path) if path.is_dir() else [path]
        for file in files:
            real = file.resolve()
            if real not in seen:
                seen.add(real)
                inputs.append(_file_input(file, separator, text_field))
    return inputs
