"""Where documents come from: text, JSONL and Parquet files, and Hugging Face datasets.

Each input gives its documents as one stream of pieces (`data/pieces.py`): a document's text in
parts of bounded size, the last one marked, so a corpus never has to fit in memory and neither
does any one document of it. An input fingerprints its content. Text that is not UTF-8 is an
error that says what the file looks like (`data/text_files.py`), never replaced: a mis-encoded
corpus should be converted, not trained on. The formats are listed in docs/reference/files.md;
which files a command line names is `data/inputs.py`'s.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path

from fixedfirst.data.pieces import Piece, pieces
from fixedfirst.data.text_files import utf8_lines
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
    def pieces(self) -> Iterator[Piece]:
        """Every document's text, in pieces, in a fixed order."""

    @abstractmethod
    def fingerprint(self) -> str:
        """A digest of the content (not of the name: moving a file does not change the data)."""

    def describe(self) -> dict:
        return {"input": self.name, "format": self.format, "bytes": self.nbytes}


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror})") from None
    return digest.hexdigest()


class FileInput(DocumentInput):
    """A file read from `path`; named `name` (another path when `path` holds a copy of what a
    pipe gave, whose `digest` was taken while copying it)."""

    def __init__(self, path: Path, name: str | None = None, digest: str | None = None) -> None:
        self.path = path
        self.name = str(path) if name is None else name
        self.nbytes = path.stat().st_size
        self.digest = digest

    def fingerprint(self) -> str:
        if self.digest is None:
            self.digest = file_digest(self.path)
        return self.digest


class TextFile(FileInput):
    format = "text"

    def __init__(self, path: Path, separator: str | None, **named) -> None:
        super().__init__(path, **named)
        self.separator = separator

    def pieces(self) -> Iterator[Piece]:
        lines = utf8_lines(self.path, self.name)
        if self.separator is None:
            yield from pieces(line.text for line in lines)
            return
        ended = False
        starts = True  # the next part begins a line

        def document() -> Iterator[str]:
            nonlocal ended, starts
            for line in lines:
                whole, starts = starts and line.complete, line.complete
                if whole and line.text.rstrip("\r\n") == self.separator:
                    return
                yield line.text
            ended = True

        while not ended:
            yield from pieces(document())


def _not_json_lines(name: str, number: int, line: str, reason: str) -> UserError:
    """The error for a line of a JSONL file that is not a JSON object: plainer words for a
    JSON document spread over several lines, the usual mistake."""
    first = line.lstrip()[:1]
    if number == 1 and first in ("[", "{"):
        what = "an array" if first == "[" else "an object"
        convert = "jq -c '.[]'" if first == "[" else "jq -c ."
        return UserError(
            f"{name}: one JSON document ({what}) over several lines, not JSON lines (one object "
            f"per line); convert it: {convert} {name} > {Path(name).stem}.jsonl"
        )
    return UserError(f"{name}:{number}: not a JSON line ({reason})")


class JsonlFile(FileInput):
    """One JSON object per line; a line is read whole (its text is one value)."""

    format = "jsonl"

    def __init__(self, path: Path, text_field: str, **named) -> None:
        super().__init__(path, **named)
        self.text_field = text_field

    def records(self) -> Iterator[tuple[int, str]]:
        """(line number, line) of every line, its parts joined."""
        parts: list[str] = []
        for line in utf8_lines(self.path, self.name):
            parts.append(line.text)
            if line.complete:
                yield line.number, "".join(parts)
                parts.clear()
        if parts:
            yield line.number, "".join(parts)

    def pieces(self) -> Iterator[Piece]:
        for number, line in self.records():
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise _not_json_lines(self.name, number, line, e.msg) from None
            if isinstance(record, list) and number == 1:
                raise _not_json_lines(self.name, number, "[", "an array")
            if not isinstance(record, dict) or self.text_field not in record:
                keys = sorted(record) if isinstance(record, dict) else type(record).__name__
                raise UserError(
                    f"{self.name}:{number}: no {self.text_field!r} field (found {keys}); "
                    "name the field with --text-field"
                )
            text = record[self.text_field]
            if not isinstance(text, str):
                raise UserError(
                    f"{self.name}:{number}: field {self.text_field!r} is "
                    f"{type(text).__name__}, not a string"
                )
            yield from pieces([text])


class ParquetFile(FileInput):
    format = "parquet"

    def __init__(self, path: Path, text_field: str, **named) -> None:
        super().__init__(path, **named)
        self.text_field = text_field
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise UserError(
                f"{self.name}: reading Parquet needs the `pyarrow` package: "
                "pip install 'fixedfirst[data]' (or pip install pyarrow)"
            ) from None
        try:
            self.file = pq.ParquetFile(path)
        except Exception as e:  # pyarrow raises ArrowInvalid and OSError subclasses
            raise UserError(f"{self.name}: not a Parquet file ({str(e).splitlines()[0]})") from None
        columns = self.file.schema_arrow.names
        if text_field not in columns:
            raise UserError(
                f"{self.name}: no {text_field!r} column (found {columns}); "
                "name it with --text-field"
            )
        column_type = str(self.file.schema_arrow.field(text_field).type)
        if column_type not in ("string", "large_string"):
            raise UserError(f"{self.name}: column {text_field!r} holds {column_type}, not strings")

    def pieces(self) -> Iterator[Piece]:
        for batch in self.file.iter_batches(columns=[self.text_field], batch_size=1024):
            for text in batch.column(0).to_pylist():
                if text is not None:
                    yield from pieces([text])


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

    def pieces(self) -> Iterator[Piece]:
        for batch in self.dataset.iter(batch_size=1024):
            for text in batch[self.text_field]:
                if text is not None:
                    yield from pieces([text])

    def fingerprint(self) -> str:
        # `datasets` fingerprints every dataset by its source files and processing.
        own = getattr(self.dataset, "_fingerprint", None)
        return own or hashlib.sha256(self.name.encode()).hexdigest()
