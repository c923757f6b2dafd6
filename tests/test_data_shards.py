"""Token shards: round trip, header fields, dtype choice, damaged or foreign files, and the
checksums of their blocks."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest

from fixedfirst.data import shards
from fixedfirst.data.shards import (
    HEADER,
    MAGIC,
    VERSION,
    CheckedShard,
    ShardChanged,
    ShardWriter,
    dtype_for_vocab,
    open_shard,
    read_header,
    write_shard,
)
from fixedfirst.errors import UserError


@pytest.mark.parametrize("vocab_size", [257, 1 << 16, (1 << 16) + 1, 100_000])
def test_round_trip_keeps_tokens_and_header(tmp_path, vocab_size):
    dtype = dtype_for_vocab(vocab_size)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, vocab_size, size=1001)
    tokens[:2] = [0, vocab_size - 1]  # both ends of the id range
    path = tmp_path / "s.bin"
    write_shard(path, tokens, dtype)

    raw = path.read_bytes()
    magic, version, code, count = HEADER.unpack(raw[: HEADER.size])
    assert (magic, version, code, count) == (MAGIC, VERSION, dtype.itemsize, tokens.size)
    assert len(raw) == HEADER.size + tokens.size * dtype.itemsize
    assert read_header(path) == (dtype, tokens.size)

    mapped = open_shard(path)
    assert isinstance(mapped, np.memmap)
    assert mapped.dtype == dtype
    np.testing.assert_array_equal(mapped, tokens)


def test_dtype_boundary_is_65536_ids():
    assert dtype_for_vocab(256).itemsize == 2
    assert dtype_for_vocab(1 << 16).itemsize == 2  # ids 0..65535 fit uint16
    assert dtype_for_vocab((1 << 16) + 1).itemsize == 4
    assert dtype_for_vocab(300, "uint32").itemsize == 4  # forcing the wider type is allowed


def test_forced_dtype_too_small_is_refused():
    with pytest.raises(UserError, match="does not fit uint16"):
        dtype_for_vocab((1 << 16) + 1, "uint16")
    with pytest.raises(UserError, match="does not fit uint32"):
        dtype_for_vocab((1 << 32) + 1)


def test_empty_shard_opens(tmp_path):
    write_shard(tmp_path / "e.bin", np.array([], dtype=np.int64), dtype_for_vocab(257))
    assert open_shard(tmp_path / "e.bin").size == 0


def _shard(tmp_path, n=100):
    path = tmp_path / "s.bin"
    write_shard(path, np.arange(n), dtype_for_vocab(257))
    return path


def _one_line_error(path) -> str:
    with pytest.raises(UserError) as info:
        open_shard(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    return message


def test_truncated_shard_is_detected(tmp_path):
    path = _shard(tmp_path)
    path.write_bytes(path.read_bytes()[:-3])
    assert "truncated" in _one_line_error(path)


def test_shard_shorter_than_header_is_detected(tmp_path):
    path = _shard(tmp_path)
    path.write_bytes(path.read_bytes()[:10])
    assert "truncated" in _one_line_error(path)


def test_trailing_bytes_are_detected(tmp_path):
    path = _shard(tmp_path)
    path.write_bytes(path.read_bytes() + b"\0\0")
    assert "corrupt" in _one_line_error(path)


def test_foreign_file_is_detected(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("just some text that is long enough to fill a header\n")
    assert "not a fixedfirst token shard" in _one_line_error(path)


def test_other_format_version_is_detected(tmp_path):
    path = _shard(tmp_path)
    raw = bytearray(path.read_bytes())
    raw[: HEADER.size] = HEADER.pack(MAGIC, VERSION + 1, 2, 100)
    path.write_bytes(bytes(raw))
    assert f"version {VERSION + 1}" in _one_line_error(path)


def test_unknown_dtype_code_is_detected(tmp_path):
    path = _shard(tmp_path)
    raw = bytearray(path.read_bytes())
    raw[: HEADER.size] = HEADER.pack(MAGIC, VERSION, 3, 100)
    path.write_bytes(bytes(raw))
    assert "dtype code 3" in _one_line_error(path)


def test_shard_writer_splits_a_stream_into_full_shards(tmp_path):
    writer = ShardWriter(tmp_path, "train", dtype_for_vocab(257), shard_tokens=10)
    pieces = [np.arange(7), np.arange(7, 8), np.arange(8, 31)]  # crosses two shard boundaries
    for piece in pieces:
        writer.add(piece)
    assert writer.total_tokens == 31
    shards = writer.close()
    assert [s["tokens"] for s in shards] == [10, 10, 10, 1]
    assert [s["file"] for s in shards] == [f"train-0000{i}.bin" for i in range(4)]
    joined = np.concatenate([open_shard(tmp_path / s["file"]) for s in shards])
    np.testing.assert_array_equal(joined, np.arange(31))


def _written(tmp_path, monkeypatch, count: int, block: int = 4) -> tuple[Path, dict]:
    """One shard of tokens 0..count-1 written with checksum blocks of `block` tokens."""
    monkeypatch.setattr(shards, "BLOCK_TOKENS", block)
    writer = ShardWriter(tmp_path, "train", dtype_for_vocab(257), shard_tokens=count)
    writer.add(np.arange(count))
    (entry,) = writer.close()
    return tmp_path / entry["file"], entry


def test_writer_records_the_crc32_of_every_block_of_the_file(tmp_path, monkeypatch):
    path, entry = _written(tmp_path, monkeypatch, 10)
    raw = path.read_bytes()[HEADER.size :]  # 2 bytes per token: blocks of 8 bytes
    expected = [zlib.crc32(raw[start : start + 8]) for start in range(0, len(raw), 8)]
    assert entry["blocks"] == {"tokens": 4, "crc32": expected}
    assert len(expected) == 3  # 4 + 4 + 2 tokens


def test_a_changed_block_is_refused_when_first_read_and_no_sooner(tmp_path, monkeypatch):
    path, entry = _written(tmp_path, monkeypatch, 12)
    raw = bytearray(path.read_bytes())
    raw[HEADER.size + 2 * 5] ^= 0x01  # token 5, in the second block (tokens 4..7)
    path.write_bytes(bytes(raw))
    shard = CheckedShard(path, open_shard(path), entry["blocks"])
    np.testing.assert_array_equal(shard.read(0, 4), np.arange(4))  # ends where block 2 starts
    np.testing.assert_array_equal(shard.read(8, 12), np.arange(8, 12))
    with pytest.raises(ShardChanged, match=r"train-00000\.bin: tokens 4\.\.7 are not what"):
        shard.read(3, 5)  # one token of the changed block
    with pytest.raises(ShardChanged, match=r"tokens 4\.\.7"):
        CheckedShard(path, open_shard(path), entry["blocks"]).verify_all()


def test_every_block_is_checked_by_verify_all(tmp_path, monkeypatch):
    path, entry = _written(tmp_path, monkeypatch, 10)
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0x80  # the last token, alone in a short last block
    path.write_bytes(bytes(raw))
    shard = CheckedShard(path, open_shard(path), entry["blocks"])
    shard.read(0, 8)
    with pytest.raises(ShardChanged, match=r"tokens 8\.\.9"):
        shard.verify_all()


def test_data_without_checksums_is_read_unchecked_and_bad_ones_are_refused(tmp_path, monkeypatch):
    path, entry = _written(tmp_path, monkeypatch, 10)
    unchecked = CheckedShard(path, open_shard(path), None)
    assert not unchecked.checked
    np.testing.assert_array_equal(unchecked.read(0, 10), np.arange(10))
    short = {"tokens": 4, "crc32": entry["blocks"]["crc32"][:2]}  # two checksums, three blocks
    with pytest.raises(UserError, match="do not describe a shard of 10 tokens"):
        CheckedShard(path, open_shard(path), short)
