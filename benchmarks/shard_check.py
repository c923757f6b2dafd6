"""Benchmark: what checking prepared shards against their checksums costs.

    .venv/bin/python benchmarks/shard_check.py [--data data/pystdlib-byte] [--repeats 7]

A run checks every block of the training shards before its first step
(`TokenSource.check_training_data`) and each validation block when it is first read
(data/shards.py). Side by side, alternated, as medians over `--repeats` rounds, on a fresh
source each time (nothing checked yet):

- the check of every training block, against one plain pass over the same bytes (a sum of the
  tokens through the same memory maps), so the table shows what the CRC-32 adds to reading,
  and against SHA-256 of the same blocks (what a cryptographic digest would cost instead);
- a default evaluation's validation batches (eval.batches x micro-batch rows), read with
  checksums and from a copy of the data whose meta.json has none.

The shards are in the page cache after the first round, so this is the CPU's cost; data read
from disk for the first time costs at least what the disk takes to deliver it. The last lines
scale the measured rate to 10B tokens of uint16 shards.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from fixedfirst.config import EvalConfig, TrainConfig
from fixedfirst.data.tokens import TokenSource


def without_checksums(data: Path, root: Path) -> Path:
    """A copy of the data directory's meta.json without its checksums, beside links to its
    shards and tokenizer (nothing is copied but meta.json)."""
    copy = root / "unchecked"
    copy.mkdir()
    for item in data.iterdir():
        if item.name != "meta.json":
            (copy / item.name).symlink_to(item.resolve())
    meta = json.loads((data / "meta.json").read_text())
    for split in meta["splits"].values():
        for entry in split["shards"]:
            entry.pop("blocks", None)
    (copy / "meta.json").write_text(json.dumps(meta))
    return copy


def sha256_blocks(source: TokenSource) -> None:
    for shard in source.train.checked:
        for start in range(0, len(shard.tokens), shard.block_tokens):
            part = shard.tokens[start : start + shard.block_tokens]
            hashlib.sha256(memoryview(np.ascontiguousarray(part))).digest()


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/pystdlib-byte"))
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    before = os.getloadavg()[0]
    train, batches = TrainConfig(), EvalConfig().batches
    seq_len, micro = train.seq_len, train.micro_batch()
    with tempfile.TemporaryDirectory() as tmp:
        plain = without_checksums(args.data, Path(tmp))
        probe = TokenSource(args.data, seq_len)
        if not all(s.checked for s in probe.train.checked + probe.val.checked):
            raise SystemExit(f"{args.data} has no checksums: prepare it with this fixedfirst")
        train_bytes = sum(s.nbytes for s in probe.train.shards)
        blocks = sum(len(s.checksums) for s in probe.train.checked)
        keys = ("check", "read", "sha256", "val", "val-plain")
        seconds: dict[str, list[float]] = {k: [] for k in keys}
        for _ in range(args.repeats):
            source = TokenSource(args.data, seq_len)
            seconds["check"].append(timed(source.check_training_data))
            source = TokenSource(args.data, seq_len)
            seconds["read"].append(
                timed(lambda s=source: [int(np.sum(t, dtype=np.uint64)) for t in s.train.shards])
            )
            seconds["sha256"].append(timed(lambda s=source: sha256_blocks(s)))
            source = TokenSource(args.data, seq_len)
            seconds["val"].append(timed(lambda s=source: s.validation_batches(batches, micro)))
            source = TokenSource(plain, seq_len)
            seconds["val-plain"].append(
                timed(lambda s=source: s.validation_batches(batches, micro))
            )
        shutil.rmtree(plain)
    median = {k: statistics.median(v) for k, v in seconds.items()}
    rate = train_bytes / median["check"]
    print(
        f"{args.data}: {train_bytes / 1e6:.1f} MB of training shards in {blocks} blocks; "
        f"medians of {args.repeats} alternated rounds; load average {before:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after, on {os.cpu_count()} cores"
    )
    print("| what | seconds | GB/s |\n| --- | --- | --- |")
    print(f"| check every training block (CRC-32) | {median['check']:.4f} | {rate / 1e9:.2f} |")
    read_rate = train_bytes / median["read"]
    print(f"| one plain pass over the same bytes | {median['read']:.4f} | {read_rate / 1e9:.2f} |")
    sha_rate = train_bytes / median["sha256"]
    print(f"| SHA-256 of the same blocks instead | {median['sha256']:.4f} | {sha_rate / 1e9:.2f} |")
    rows = f"{batches} x {micro} rows of {seq_len + 1} tokens"
    print(f"| a default evaluation's batches ({rows}), checked | {median['val']:.4f} | |")
    print(f"| the same, from data without checksums | {median['val-plain']:.4f} | |")
    ten_billion = 10e9 * 2  # bytes of uint16 tokens
    print(
        f"check / plain pass: {median['check'] / median['read']:.2f}x; SHA-256 / check: "
        f"{median['sha256'] / median['check']:.2f}x; at {rate / 1e9:.2f} GB/s "
        f"the training shards of 10B uint16 tokens ({ten_billion / 1e9:.0f} GB) take "
        f"{ten_billion / rate:.0f} s per process to check, from the page cache"
    )


if __name__ == "__main__":
    main()
