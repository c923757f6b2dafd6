"""Token shard files: a 24-byte header, then the tokens as raw little-endian integers.

Training reads tokens through memory maps, so a shard must be a flat array at a known offset
(no compression, no framing). The header makes a shard self-describing and lets a reader reject a
file that is truncated (a crashed copy, a full disk) or not a shard at all before it hands garbage
token ids to the model:

    offset  size  field
    0       8     magic b"FFTOKENS"
    8       4     format version (uint32, currently 1)
    12      4     dtype code: bytes per token, 2 = uint16, 4 = uint32
    16      8     token count (uint64)
    24      ...   tokens

uint16 halves disk and page-cache use and suffices for any vocabulary up to 65536 ids; larger
vocabularies take uint32.

The header catches a truncated file, not a changed one. So `prepare` also records, in meta.json
beside each shard, the CRC-32 of every block of BLOCK_TOKENS tokens, and a reader compares a
block with its checksum the first time it reads any token of it (`CheckedShard`): a shard that
changed after `prepare` (a flipped bit, a bad copy, an edit) is refused before a token of the
changed block is trained on or scored. CRC-32 because this guards against accidents, not an
adversary: it detects every change of up to 32 consecutive bits, misses a random change with
probability 2^-32, and is faster than SHA-256 (benchmarks/shard_check.py measures both; docs/
design.md §5 says what the check costs).
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from fixedfirst.errors import UserError
from fixedfirst.files.paths import shown

MAGIC = b"FFTOKENS"
VERSION = 1
HEADER = struct.Struct("<8sIIQ")  # magic, version, dtype code, token count
DTYPES: dict[int, np.dtype] = {2: np.dtype("<u2"), 4: np.dtype("<u4")}
"""dtype code (bytes per token) -> the numpy dtype of the tokens."""


def dtype_for_vocab(vocab_size: int, requested: str = "auto") -> np.dtype:
    """The shard dtype for ids in [0, vocab_size): uint16 up to 65536 ids, else uint32.

    `requested` = "uint16" or "uint32" forces one, and is refused when the vocabulary does not fit.
    """
    if requested == "auto":
        requested = "uint16" if vocab_size <= 1 << 16 else "uint32"
    dtype = np.dtype(requested).newbyteorder("<")
    if dtype.itemsize not in DTYPES or dtype.kind != "u":
        raise UserError(f"shard dtype {requested!r}: expected uint16 or uint32")
    capacity = int(np.iinfo(dtype).max) + 1
    if vocab_size > capacity:
        hint = "; use --dtype uint32 (or auto)" if dtype.itemsize == 2 else ""
        raise UserError(
            f"a vocabulary of {vocab_size} ids does not fit {requested} token shards "
            f"(at most {capacity} ids){hint}"
        )
    return dtype


def write_shard(path: Path, tokens: np.ndarray, dtype: np.dtype) -> None:
    """Write one shard holding `tokens` (any integer array whose values fit `dtype`). Through
    Python's file object, not numpy's `tofile`, whose short write on a full disk is an OSError
    without the system's reason ("N requested and M written")."""
    tokens = np.ascontiguousarray(np.asarray(tokens).astype(dtype, copy=False))
    with open(path, "wb") as f:
        f.write(HEADER.pack(MAGIC, VERSION, dtype.itemsize, tokens.size))
        f.write(tokens.data.cast("B"))


def read_header(path: Path) -> tuple[np.dtype, int]:
    """(dtype, token count) of a shard, after checking that the file is a complete shard."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(HEADER.size)
    except OSError as e:
        raise UserError(f"{path}: cannot read token shard ({e.strerror})") from None
    if len(head) < HEADER.size:
        raise UserError(f"{path}: truncated token shard ({size} bytes, shorter than the header)")
    magic, version, code, count = HEADER.unpack(head)
    if magic != MAGIC:
        raise UserError(f"{path}: not a fixedfirst token shard (bad magic bytes)")
    if version != VERSION:
        raise UserError(
            f"{path}: token shard format version {version}; this fixedfirst reads version "
            f"{VERSION}; prepare the data again"
        )
    if code not in DTYPES:
        raise UserError(f"{path}: corrupt token shard (unknown dtype code {code})")
    expected = HEADER.size + count * code
    if size < expected:
        raise UserError(
            f"{path}: truncated token shard: the header says {count} tokens "
            f"({expected} bytes), the file has {size} bytes"
        )
    if size > expected:
        raise UserError(
            f"{path}: corrupt token shard: {size - expected} bytes after the {count} tokens "
            "the header announces"
        )
    return DTYPES[code], count


def open_shard(path: Path) -> np.memmap | np.ndarray:
    """The tokens of a shard as a read-only memory map (no copy; pages load on demand)."""
    dtype, count = read_header(path)
    if count == 0:  # numpy cannot map zero bytes
        return np.empty(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", offset=HEADER.size, shape=(count,))


BLOCK_TOKENS = 1 << 20
"""Tokens per checksummed block (2 MB of uint16): a validation pass over a few thousand tokens
reads one block, and a 10B-token dataset has about ten thousand checksums in its meta.json."""


def block_checksums(tokens: np.ndarray, block_tokens: int) -> list[int]:
    """The CRC-32 of each run of `block_tokens` tokens (the last one may be shorter)."""
    return [
        zlib.crc32(np.ascontiguousarray(tokens[start : start + block_tokens]).data)
        for start in range(0, len(tokens), block_tokens)
    ]


class ShardChanged(UserError):
    """A block of a shard whose checksum is not the one `prepare` recorded."""

    def __init__(self, path: Path, first: int, last: int) -> None:
        self.path, self.first, self.last = path, first, last
        super().__init__(
            f"{shown(path)}: tokens {first:,}..{last:,} are not what `fixedfirst prepare` wrote "
            "(CRC-32 mismatch): the shard changed after it was prepared; prepare the data "
            "again into a new directory (meta.json's sources name the inputs)"
        )


class CheckedShard:
    """A shard's tokens, each block compared with its recorded checksum when first read.

    `blocks` is the shard's entry in meta.json ({"tokens": block size, "crc32": [...]}), or
    None for data prepared before checksums were recorded, which is read unchecked."""

    def __init__(self, path: Path, tokens: np.ndarray, blocks: dict[str, Any] | None) -> None:
        self.path = Path(path)
        self.tokens = tokens
        self.block_tokens = 0
        self.checksums: list[int] = []
        if blocks is not None:
            size, checksums = blocks.get("tokens"), blocks.get("crc32")
            if (
                not isinstance(size, int)
                or size <= 0
                or not isinstance(checksums, list)
                or len(checksums) != -(-len(tokens) // size)
            ):
                raise UserError(
                    f"{shown(self.path)}: its checksums in meta.json do not describe a shard of "
                    f"{len(tokens)} tokens; meta.json was changed after `fixedfirst prepare` "
                    "wrote it: prepare the data again"
                )
            self.block_tokens, self.checksums = size, checksums
        self.verified = np.zeros(len(self.checksums), dtype=bool)

    @property
    def checked(self) -> bool:
        """Whether the shard has checksums to compare with."""
        return self.block_tokens > 0

    def read(self, start: int, end: int) -> np.ndarray:
        """Tokens [start, end), after checking every block they lie in."""
        if self.checked and end > start:
            for block in range(start // self.block_tokens, (end - 1) // self.block_tokens + 1):
                if not self.verified[block]:
                    self._verify(block)
        return self.tokens[start:end]

    def verify_all(self) -> None:
        """Check every block not checked yet."""
        for block in np.flatnonzero(~self.verified):
            self._verify(int(block))

    def trust_all(self) -> None:
        """Take every block as checked: another process on this machine checked this file."""
        self.verified[:] = True

    def _verify(self, block: int) -> None:
        first = block * self.block_tokens
        part = self.tokens[first : first + self.block_tokens]
        if zlib.crc32(np.ascontiguousarray(part).data) != self.checksums[block]:
            raise ShardChanged(self.path, first, first + len(part) - 1)
        self.verified[block] = True


class ShardWriter:
    """Streams tokens into `PREFIX-00000.bin`, `PREFIX-00001.bin`, ... of `shard_tokens` each.

    Tokens arrive a document (or a piece of one) at a time and go straight into the open shard
    file, their blocks' checksums taken on the way; the header's token count is written when the
    shard is full or closed. Memory stays at the tokens of one call, however large a shard is.
    """

    def __init__(self, directory: Path, prefix: str, dtype: np.dtype, shard_tokens: int) -> None:
        if shard_tokens < 1:
            raise UserError(f"--shard-tokens must be >= 1, got {shard_tokens}")
        self.directory = Path(directory)
        self.prefix = prefix
        self.dtype = dtype
        self.shard_tokens = shard_tokens
        self.file: BinaryIO | None = None
        self.filled = 0
        """Tokens in the open shard."""
        self.checksums: list[int] = []
        """The CRC-32 of each full block of the open shard."""
        self.block = (0, 0)
        """(tokens, running CRC-32) of the open shard's last, unfinished block."""
        self.shards: list[dict[str, Any]] = []
        """One {"file", "tokens", "blocks"} entry per shard written, in order ("blocks": the
        block size and the CRC-32 of each block, see `CheckedShard`)."""

    def add(self, tokens: np.ndarray) -> None:
        tokens = np.ascontiguousarray(np.asarray(tokens).astype(self.dtype, copy=False))
        start = 0
        while start < tokens.size:
            if self.file is None:
                self.file = open(self.directory / self._name(), "wb")  # noqa: SIM115 (kept open)
                self.file.write(HEADER.pack(MAGIC, VERSION, self.dtype.itemsize, 0))
            take = min(self.shard_tokens - self.filled, tokens.size - start)
            self._write(tokens[start : start + take])
            start += take
            if self.filled == self.shard_tokens:
                self._flush()

    def _name(self) -> str:
        return f"{self.prefix}-{len(self.shards):05d}.bin"

    def _write(self, tokens: np.ndarray) -> None:
        assert self.file is not None
        done = 0
        while done < tokens.size:
            count, crc = self.block
            take = min(BLOCK_TOKENS - count, tokens.size - done)
            crc = zlib.crc32(tokens[done : done + take].data, crc)
            count, done = count + take, done + take
            if count == BLOCK_TOKENS:
                self.checksums.append(crc)
                count, crc = 0, 0
            self.block = (count, crc)
        self.file.write(tokens.data.cast("B"))
        self.filled += tokens.size

    def _flush(self) -> None:
        """Finish the open shard: its last block's checksum, its header's token count."""
        assert self.file is not None
        count, crc = self.block
        checksums = self.checksums + ([crc] if count else [])
        self.file.seek(0)
        self.file.write(HEADER.pack(MAGIC, VERSION, self.dtype.itemsize, self.filled))
        self.file.close()
        blocks = {"tokens": BLOCK_TOKENS, "crc32": checksums}
        self.shards.append({"file": self._name(), "tokens": self.filled, "blocks": blocks})
        self.file, self.filled, self.checksums, self.block = None, 0, [], (0, 0)

    def close(self) -> list[dict[str, Any]]:
        """Write the last, partly filled shard; return the list of shards."""
        if self.file is not None:
            self._flush()
        return self.shards

    @property
    def total_tokens(self) -> int:
        return sum(int(s["tokens"]) for s in self.shards) + self.filled
