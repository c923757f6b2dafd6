"""Reading a file as UTF-8 text, in bounded parts, and saying plainly what it is when it is not.

A file is read in lines of at most PART_BYTES bytes (a longer line comes in several parts), so no
line, however long, is ever held whole. A UTF-8 byte-order mark at the start is not text and is
dropped (Windows editors write one). Anything that is not UTF-8 is refused in one line that says
what it looks like, since a mis-encoded corpus should be converted, not trained on: UTF-16 or
UTF-32 (by its byte-order mark, or for UTF-16 without one by the zero in every other byte), a
binary format known by its first bytes (an image, an archive, a compressed file, a program), any
other binary file (a NUL byte), and text in another encoding (the first byte that is not UTF-8,
with its line and offset).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, NamedTuple

from fixedfirst.errors import UserError

PART_BYTES = 1 << 16
HEAD_BYTES = 4096
"""What is read first to tell what a file is."""
UTF8_BOM = b"\xef\xbb\xbf"
OTHER_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)
LEAVE_OUT = "leave it out of the inputs"
DECOMPRESS = "decompress it first (e.g. `fixedfirst prepare <(zcat FILE) ...`)"
SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "PNG image", LEAVE_OUT),
    (b"\xff\xd8\xff", "JPEG image", LEAVE_OUT),
    (b"GIF87a", "GIF image", LEAVE_OUT),
    (b"GIF89a", "GIF image", LEAVE_OUT),
    (b"%PDF-", "PDF document", "extract its text first (e.g. pdftotext FILE)"),
    (b"PK\x03\x04", "ZIP archive", "unpack it and give the text files"),
    (b"\x1f\x8b", "gzip-compressed file", DECOMPRESS),
    (b"\xfd7zXZ\x00", "xz-compressed file", DECOMPRESS),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed file", DECOMPRESS),
    (b"7z\xbc\xaf\x27\x1c", "7-Zip archive", "unpack it and give the text files"),
    (b"\x7fELF", "program (ELF)", LEAVE_OUT),
    (b"SQLite format 3\x00", "SQLite database", LEAVE_OUT),
)


class Line(NamedTuple):
    number: int
    """1 for the first line; every part of a long line has its number."""
    text: str
    complete: bool
    """The part ends its line (with the newline, or at the end of the file)."""


def _what_binary(head: bytes) -> tuple[str, str] | None:
    """(what the file is, what to do) for a file starting with `head` that is surely not UTF-8
    text, told by its first bytes; None when they do not say."""
    for mark, kind in OTHER_BOMS:
        if head.startswith(mark):
            return (
                f"{kind} text (it begins with the byte-order mark "
                f"{mark[: 2 if kind == 'UTF-16' else 4].hex(' ').upper()}), not UTF-8",
                f"convert it to UTF-8 first: iconv -f {kind} -t UTF-8 FILE > OUT",
            )
    for mark, kind, advice in SIGNATURES:
        if head.startswith(mark):
            return f"a {kind}, not text", advice
    even, odd = head[0::2], head[1::2]
    if len(head) >= 8 and b"\0" in head:
        for zeros, other, order in ((odd, even, "LE"), (even, odd, "BE")):
            if zeros.count(0) >= 0.3 * len(zeros) and other.count(0) <= 0.05 * len(other):
                return (
                    f"UTF-16{order} text (without a byte-order mark: every other byte is 0), "
                    "not UTF-8",
                    f"convert it to UTF-8 first: iconv -f UTF-16{order} -t UTF-8 FILE > OUT",
                )
    return None


def _split_character(raw: bytes) -> int:
    """How many bytes at the end of `raw` begin a UTF-8 character that continues after it."""
    for back in range(1, min(4, len(raw)) + 1):
        byte = raw[-back]
        if byte < 0x80:
            return 0
        if byte >= 0xC0:  # a lead byte: how long is its character?
            length = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return back if back < length else 0
    return 0


def check_head(name: str, f: BinaryIO) -> None:
    """Refuse a file whose first bytes say it is not UTF-8 text; leave the position at the
    text's start (after a UTF-8 byte-order mark)."""
    head = f.read(HEAD_BYTES)
    binary = _what_binary(head)
    if binary is not None:
        what, advice = binary
        converted = str(Path(name).with_name(f"{Path(name).stem}-utf8{Path(name).suffix}"))
        raise UserError(f"{name}: {what}; {advice.replace('FILE', name).replace('OUT', converted)}")
    f.seek(len(UTF8_BOM) if head.startswith(UTF8_BOM) else 0)


def utf8_lines(path: Path, name: str | None = None) -> Iterator[Line]:
    """The lines of a UTF-8 text file, in parts of at most PART_BYTES bytes; errors name the
    file as `name` (default: its path), the line and the byte offset."""
    name = str(path) if name is None else name
    try:
        f = open(path, "rb")  # noqa: SIM115 (a generator: closed by the `with` below)
    except OSError as e:
        raise UserError(f"{name}: cannot read ({e.strerror})") from None
    with f:
        check_head(name, f)
        offset = f.tell()
        number, carry = 1, b""
        while raw := f.readline(PART_BYTES):
            nul = raw.find(b"\0")
            if nul >= 0:
                raise UserError(
                    f"{name}: a binary file, not text (a NUL byte at offset {offset + nul}); "
                    "give text, JSONL or Parquet files"
                )
            complete = raw.endswith(b"\n") or len(raw) < PART_BYTES  # a newline, or the end
            keep = 0 if complete else _split_character(raw)
            data = carry + raw[: len(raw) - keep]
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise UserError(
                    f"{name}: not UTF-8 text (byte 0x{data[e.start]:02x} at line {number}, "
                    f"offset {offset - len(carry) + e.start}); convert it to UTF-8 first "
                    f"(e.g. iconv -f LATIN1 -t UTF-8 {name} > {name}.utf8)"
                ) from None
            carry = raw[len(raw) - keep :]
            offset += len(raw)
            if text or complete:
                yield Line(number, text, complete)
            number += complete
        if carry:
            raise UserError(
                f"{name}: not UTF-8 text (it ends inside a character, at offset {offset}); "
                "the file may be cut short"
            )
