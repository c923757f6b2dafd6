"""Training batches from prepared token shards, read through memory maps.

The training split is cut into windows of seq_len + 1 tokens that start every seq_len tokens
(inputs are tokens [s, s + T), targets [s + 1, s + T + 1)), so every token is a target exactly once
per epoch. Windows do not cross shard boundaries, which costs at most one window per shard.

Order: epoch e visits the windows in a permutation drawn from (seed, e): a different order each
epoch, the same order on every rank and in every resumed run. The position is one integer, the
number of sequences handed out so far, so a checkpoint stores a single number and the epoch and
the place within it follow from it.

Validation batches are the first windows of the validation split, in file order: fixed, so that
every evaluation of every run on this data scores the same tokens. With a draw seed they are
windows drawn from the whole validation split instead (`held_out_rows`), or all of its windows
when it holds fewer than asked for.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fixedfirst.config import RunConfig
from fixedfirst.data.prepared import check_model_vocab, read_meta
from fixedfirst.data.registry import DataKind, register_kind
from fixedfirst.data.shards import CheckedShard, open_shard
from fixedfirst.data.source import Batch, BatchSource, held_out_rows, in_batches, rank_rows
from fixedfirst.data.tokenizer import TOKENIZER_DIR, Tokenizer, load_tokenizer, missing_files
from fixedfirst.errors import UserError
from fixedfirst.files.paths import shown


class _Windows:
    """The windows of seq_len + 1 tokens (stride seq_len) over the shards of one split, each
    read through its checksums (`CheckedShard`)."""

    def __init__(self, root: Path, split: dict[str, Any], seq_len: int, vocab_size: int) -> None:
        self.root = root
        self.seq_len = seq_len
        self.vocab_size = vocab_size
        self.shards = []
        self.checked: list[CheckedShard] = []
        for entry in split["shards"]:
            tokens = open_shard(root / entry["file"])
            if tokens.size != entry["tokens"]:
                raise UserError(
                    f"{shown(root / entry['file'])}: holds {tokens.size} tokens, meta.json says "
                    f"{entry['tokens']}; prepare the data again"
                )
            self.shards.append(tokens)
            self.checked.append(CheckedShard(root / entry["file"], tokens, entry.get("blocks")))
        counts = [max(0, (s.size - 1) // seq_len) for s in self.shards]
        self.starts = np.cumsum([0, *counts])  # first window index of each shard
        self.tokens = sum(s.size for s in self.shards)

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getitem__(self, index: int) -> np.ndarray:
        shard = int(np.searchsorted(self.starts, index, side="right")) - 1
        start = (index - int(self.starts[shard])) * self.seq_len
        return self.checked[shard].read(start, start + self.seq_len + 1)

    def verify(self) -> None:
        """Check every shard of the split against its checksums now."""
        for shard in self.checked:
            shard.verify_all()

    def trust(self) -> None:
        """Take every shard as checked (another process on this machine checked them)."""
        for shard in self.checked:
            shard.trust_all()

    def batch(self, indices) -> Batch:
        rows = np.stack([self[int(i)] for i in indices]).astype(np.int64)
        if rows.size and int(rows.max()) >= self.vocab_size:  # one pass over a small batch
            raise UserError(
                f"{shown(self.root)}: token id {int(rows.max())} is outside the data's vocabulary "
                f"({self.vocab_size} ids in meta.json); the shards or meta.json were changed "
                "after `fixedfirst prepare` wrote them: prepare the data again"
            )
        data = torch.from_numpy(rows)
        return Batch(data[:, :-1].contiguous(), data[:, 1:].contiguous())


class TokenSource(BatchSource):
    """Batches of `seq_len` tokens from the DATA directory written by `fixedfirst prepare`."""

    def __init__(self, path: str | Path, seq_len: int, seed: int = 0) -> None:
        self.path = Path(path)
        self.meta = read_meta(self.path)
        self.vocab_size = int(self.meta["vocab_size"])
        self.seq_len = seq_len
        self.seed = seed
        described = self.meta.get("tokenizer", {}).get("vocab_size")
        if described is not None and described != self.vocab_size:
            raise UserError(
                f"{shown(self.path / 'meta.json')}: vocab_size = {self.vocab_size} but its "
                f"tokenizer has {described} ids; the file was changed after `fixedfirst "
                "prepare` wrote it: prepare the data again"
            )
        missing = missing_files(self.path / TOKENIZER_DIR, self.meta["tokenizer"]["kind"])
        if missing:
            raise UserError(
                f"{shown(self.path)}: the prepared data is incomplete: its tokenizer "
                f"({shown(self.path / TOKENIZER_DIR / missing[0])}) is missing; prepare the data "
                "again (`fixedfirst prepare INPUT... --out DIR` writes the tokenizer beside the "
                "shards)"
            )
        self.train = _Windows(self.path, self.meta["splits"]["train"], seq_len, self.vocab_size)
        self.val = _Windows(self.path, self.meta["splits"]["val"], seq_len, self.vocab_size)
        if len(self.train) == 0:
            raise UserError(
                f"{shown(self.path)}: the training split has {self.train.tokens} tokens, fewer "
                f"than one sequence of train.seq_len + 1 = {seq_len + 1}; lower train.seq_len "
                "or add data"
            )
        self.position = 0
        self._order_epoch = -1
        self._order = np.empty(0, dtype=np.int64)
        self._tokenizer: Tokenizer | None = None

    @classmethod
    def from_config(cls, config: RunConfig) -> TokenSource:
        """The source of a run; refuses a model whose vocabulary does not cover the data's."""
        assert config.data.path is not None  # DataConfig requires it for kind = "tokens"
        check_model_vocab(config.model.vocab_size, config.data.path)
        return cls(config.data.path, config.train.seq_len, seed=config.train.seed)

    @property
    def tokenizer(self) -> Tokenizer:  # type: ignore[override]  # read-only: loaded on first use
        """The tokenizer saved beside the shards (read on first use: BPE needs `tokenizers`)."""
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.path)
            if self._tokenizer.vocab_size != self.vocab_size:
                raise UserError(
                    f"{shown(self.path)}: the tokenizer has {self._tokenizer.vocab_size} ids, the "
                    f"data {self.vocab_size}; prepare the data again"
                )
        return self._tokenizer

    def save_tokenizer(self, directory: Path) -> bool:
        """A copy of the tokenizer files beside the shards (no `tokenizers` import needed)."""
        shutil.copytree(self.path / TOKENIZER_DIR, directory)
        return True

    def check_training_data(self) -> None:
        """Every block of the training shards against its checksum: a run reads nearly every
        block within its first steps anyway (windows in random order), so checking them all
        up front costs the same and refuses a changed shard before the run directory is
        touched. Validation blocks are checked as they are first read."""
        self.train.verify()

    def training_data_checked(self) -> None:
        self.train.trust()

    def _order_of(self, epoch: int) -> np.ndarray:
        """The window permutation of `epoch` (kept for the current epoch only)."""
        if epoch != self._order_epoch:
            rng = np.random.default_rng([self.seed, epoch, 0x70CE5])
            self._order = rng.permutation(len(self.train))
            self._order_epoch = epoch
        return self._order

    def _window_at(self, position: int) -> int:
        epoch, offset = divmod(position, len(self.train))
        return int(self._order_of(epoch)[offset])

    @property
    def epoch(self) -> float:
        """Passes over the training split so far (fractional)."""
        return self.position / len(self.train)

    def next_batch(self, global_batch: int, rank: int = 0, world_size: int = 1) -> Batch:
        rows = rank_rows(global_batch, rank, world_size)
        batch = self.train.batch([self._window_at(self.position + r) for r in rows])
        self.position += global_batch
        return batch

    def validation_batches(
        self, n_batches: int, batch_size: int, seed: int | None = None
    ) -> list[Batch]:
        needed = n_batches * batch_size
        if seed is not None:
            rows = held_out_rows(needed, seed, len(self.val))
            return [self.val.batch(batch) for batch in in_batches(rows, batch_size)]
        if needed > len(self.val):
            raise UserError(
                f"{shown(self.path)}: the validation split holds {len(self.val)} sequences of "
                f"{self.seq_len + 1} tokens, {n_batches} batches of {batch_size} need {needed}; "
                "lower eval.batches or the batch size, or prepare the data with a larger "
                "--val-fraction"
            )
        return [
            self.val.batch(range(b * batch_size, (b + 1) * batch_size)) for b in range(n_batches)
        ]

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position, "fingerprint": self.meta["fingerprint"]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = state.get("fingerprint")
        if saved is not None and saved != self.meta["fingerprint"]:
            raise UserError(
                f"the checkpoint was trained on other data than {shown(self.path)} "
                "(the data fingerprints differ); point data.path at the data it was trained on"
            )
        self.position = int(state["position"])

    def describe(self) -> str:
        kind = self.meta["tokenizer"]["kind"]
        unchecked = not all(s.checked for s in self.train.checked + self.val.checked)
        return (
            f"tokens at {self.path} ({self.train.tokens:,} training tokens, "
            f"{len(self.train):,} sequences of {self.seq_len}, {kind} tokenizer, "
            f"vocab {self.vocab_size})"
            + (
                "; its shards have no checksums (prepared before fixedfirst recorded them) and "
                "are read unchecked: prepare it again into a new directory to have them checked"
                if unchecked
                else ""
            )
        )


KIND = DataKind(
    name="tokens",
    summary="token shards written by `fixedfirst prepare` at data.path (your own text)",
    build=TokenSource.from_config,
)
register_kind(KIND)
