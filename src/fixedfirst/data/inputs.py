"""Which documents a command line names: files, directories, pipes and Hugging Face datasets.

`resolve_inputs` turns the INPUT arguments into `DocumentInput`s before any work starts, so a
missing path or package fails at once and nothing is half done, and it says what it did besides
reading a file (`Inputs.notes`): a corpus is never trained on in part without a word.

A directory gives every regular file below it, in sorted order, and
- follows links to directories (a link to a directory already read, a loop back to a parent
  included, is not followed again, and said);
- refuses a link to nothing (a dangling link is a file the user believes is in the corpus);
- skips hidden files and directories, prepared data (a `fixedfirst prepare` output) and what is
  neither a file nor a directory (a socket, a named pipe), and says so with their names.
A file reached twice (named twice, or through a link) is read once.

An input that is not a regular file (a named pipe, `<(zcat corpus.jsonl.gz)`) can be read only
once, and `prepare` reads its inputs more than once (a digest, BPE training, tokenizing), so it
is copied to a file first (`spool`), fingerprinted on the way. It has no file name to tell its
format by, so its first bytes do: Parquet's magic, a first line that is a JSON object (JSON
lines), else plain text.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from fixedfirst.data.documents import (
    HUB_PREFIX,
    JSONL_SUFFIXES,
    PARQUET_SUFFIXES,
    DocumentInput,
    FileInput,
    HubDataset,
    JsonlFile,
    ParquetFile,
    TextFile,
)
from fixedfirst.data.prepared import is_prepared
from fixedfirst.errors import UserError

LISTED = 3
"""Names a note lists before "..."."""


@dataclass
class Pipe:
    """An input that can be read only once, not yet copied (see the module docstring)."""

    path: Path
    name: str

    def spool(self, into: Path, separator: str | None, text_field: str) -> FileInput:
        """Copy it into the file `into`, once, and read it from there."""
        digest = hashlib.sha256()
        try:
            with open(self.path, "rb") as source, open(into, "wb") as copy:
                for block in iter(lambda: source.read(1 << 20), b""):
                    digest.update(block)
                    copy.write(block)
        except OSError as e:
            raise UserError(f"{self.name}: cannot read ({e.strerror})") from None
        named = {"name": self.name, "digest": digest.hexdigest()}
        with open(into, "rb") as f:
            head = f.read(4)
            first = f.readline(1 << 20) if head != b"PAR1" else b""
        if head == b"PAR1":
            return ParquetFile(into, text_field, **named)
        try:
            is_json = isinstance(json.loads((head + first).decode("utf-8-sig")), dict)
        except ValueError:  # not UTF-8 (UnicodeDecodeError) or not JSON
            is_json = False
        if is_json:
            return JsonlFile(into, text_field, **named)
        return TextFile(into, separator, **named)


@dataclass
class Inputs:
    """What the command line names, in order: inputs to read, pipes to copy first."""

    items: list[DocumentInput | Pipe] = field(default_factory=list)
    directories: dict[Path, str] = field(default_factory=dict)
    """The directories named (resolved -> as given), which `--out` must stay out of."""
    notes: list[str] = field(default_factory=list)
    """Lines saying what was skipped or followed besides the files."""


def file_input(path: Path, separator: str | None, text_field: str) -> DocumentInput:
    suffix = path.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        return JsonlFile(path, text_field)
    if suffix in PARQUET_SUFFIXES:
        return ParquetFile(path, text_field)
    return TextFile(path, separator)


def _listed(paths: list[str]) -> str:
    more = f" and {len(paths) - LISTED} more" if len(paths) > LISTED else ""
    return ", ".join(paths[:LISTED]) + more


@dataclass
class _Walk:
    """What a walk below one directory found."""

    files: list[Path] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)
    followed: list[str] = field(default_factory=list)
    repeated: list[str] = field(default_factory=list)
    prepared: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)
    visited: set[tuple[int, int]] = field(default_factory=set)

    def visit(self, directory: Path) -> None:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as e:
            raise UserError(f"{directory}: cannot read the directory ({e.strerror})") from None
        for entry in entries:
            path = Path(entry.path)
            if entry.name.startswith("."):
                self.hidden.append(str(path))
                continue
            if entry.is_symlink() and not path.exists():
                raise UserError(
                    f"{path}: a link to {os.readlink(path)}, which does not exist; fix the link "
                    "or remove it (it names a file you may believe is in the corpus)"
                )
            if entry.is_dir():
                self.enter(path, linked=entry.is_symlink())
            elif entry.is_file():
                self.files.append(path)
            else:
                self.other.append(str(path))

    def enter(self, directory: Path, linked: bool) -> None:
        info = directory.stat()
        key = (info.st_dev, info.st_ino)
        if key in self.visited:
            self.repeated.append(f"{directory} -> {os.readlink(directory)}")
            return
        if is_prepared(directory):
            self.prepared.append(str(directory))
            return
        self.visited.add(key)
        if linked:
            self.followed.append(f"{directory} -> {os.readlink(directory)}")
        self.visit(directory)

    def notes(self, top: Path) -> list[str]:
        said = [
            (self.followed, "followed {n} link(s) to directories: {names}"),
            (self.repeated, "did not follow {n} link(s) to a directory already read: {names}"),
            (
                self.hidden,
                "skipped {n} hidden file(s) and directories: {names} (name a hidden file "
                "as an INPUT to read it)",
            ),
            (self.prepared, "skipped {n} directory(ies) of prepared data, not text: {names}"),
            (
                self.other,
                "skipped {n} that are neither files nor directories: {names} (name a named "
                "pipe as an INPUT to read it)",
            ),
        ]
        return [
            f"{top}: " + text.format(n=len(names), names=_listed(names))
            for names, text in said
            if names
        ]


def resolve_inputs(
    specs: list[str], separator: str | None = None, text_field: str = "text"
) -> Inputs:
    """The inputs named on the command line, directories expanded, in a fixed order."""
    if not specs:
        raise UserError("no INPUT given")
    inputs = Inputs()
    seen: dict[Path, str] = {}
    twice: list[str] = []
    hidden: list[str] = []
    for spec in specs:
        if spec.startswith(HUB_PREFIX):
            inputs.items.append(HubDataset(spec, text_field))
            continue
        path = Path(spec)
        if path.is_symlink() and not path.exists():
            raise UserError(f"{spec}: a link to {os.readlink(path)}, which does not exist")
        if not path.exists():
            raise UserError(f"{spec}: no such file or directory")
        mode = path.stat().st_mode
        if stat.S_ISDIR(mode):
            walk = _Walk()
            walk.enter(path, linked=False)
            if walk.prepared and str(path) in walk.prepared:
                raise UserError(
                    f"{spec}: prepared data (written by `fixedfirst prepare`), not text; name "
                    "the text it was made from"
                )
            inputs.directories[path.resolve()] = spec
            inputs.notes += walk.notes(path)
            hidden += walk.hidden
            files = walk.files
        elif not stat.S_ISREG(mode):
            inputs.items.append(Pipe(path, spec))
            continue
        else:
            files = [path]
        for file in files:
            real = file.resolve()
            if real in seen:
                twice.append(f"{file} (the same file as {seen[real]})")
                continue
            seen[real] = str(file)
            inputs.items.append(file_input(file, separator, text_field))
    if twice:
        inputs.notes.append(f"read once: {_listed(twice)}")
    if not inputs.items and hidden:  # "empty input" would not say why
        raise UserError(
            f"no text to read: {', '.join(specs)} hold(s) only hidden files and directories "
            f"({_listed(hidden)}), which are skipped; name a hidden file as an INPUT to read it"
        )
    return inputs


def copy_pipes(
    inputs: Inputs, into: Path, separator: str | None, text_field: str
) -> list[DocumentInput]:
    """Every input, pipes copied into the directory `into` and read from there."""
    resolved: list[DocumentInput] = []
    for index, item in enumerate(inputs.items):
        if isinstance(item, Pipe):
            into.mkdir(exist_ok=True)
            item = item.spool(into / f"input-{index}", separator, text_field)
            inputs.notes.append(f"{item.name}: not a regular file, read once ({item.format})")
        resolved.append(item)
    return resolved


def check_out_of_inputs(out: Path, inputs: Inputs) -> None:
    """Refuse an --out inside a directory given as input: the next prepare of that directory
    would read the prepared data as text."""
    target = out.resolve()
    for directory, given in inputs.directories.items():
        if target == directory or directory in target.parents:
            raise UserError(
                f"--out {out}: is inside the input directory {given}, whose next prepare "
                f"would read the data as text; choose an --out outside {given}"
            )
