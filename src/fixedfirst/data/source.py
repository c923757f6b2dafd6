"""The batch-source interface every data kind plugs into the trainer through.

A source hands out training batches in a fixed, seeded order and can say where it is
(`state_dict`) and go back there (`load_state_dict`), so a resumed run sees exactly the batches it
would have seen. Each optimizer step asks for the *global* batch; under torchrun every rank gets
its own disjoint rows of it, so a run on N ranks trains on the same data as a run on one.
Validation batches are the same every time they are asked for: the first rows of the held-out
set, or with a draw seed, rows drawn from the whole held-out set by that seed (`held_out_rows`),
so that an experiment over seeds can let the held-out sample vary with the seed while every arm
of one seed scores the same rows. Sources are built from a run configuration by
`fixedfirst.data.registry.build_source`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fixedfirst.data.tokenizer import Tokenizer
from fixedfirst.errors import UserError
from fixedfirst.model.loss import IGNORE_INDEX


@dataclass
class Batch:
    """inputs (B, T) token ids and targets (B, T): the next token, or IGNORE_INDEX where not
    scored."""

    inputs: torch.Tensor
    targets: torch.Tensor

    def to(self, device: torch.device) -> Batch:
        """Both tensors on `device`. A copy to a device does not wait (asynchronous from pinned
        memory, data/prefetch.py: the training step reads neither on the host); one to the host
        does, since the host may read it at once."""
        wait = torch.device(device).type == "cpu"
        return Batch(
            self.inputs.to(device, non_blocking=not wait),
            self.targets.to(device, non_blocking=not wait),
        )

    @property
    def scored_tokens(self) -> int:
        """Positions whose target is scored."""
        return int((self.targets != IGNORE_INDEX).sum())


class BatchSource(ABC):
    """Training batches with a resumable position, and fixed validation batches."""

    vocab_size: int
    """Token ids are in [0, vocab_size); the model's vocab_size must be at least this."""
    tokenizer: Tokenizer | None = None
    """Text <-> ids of this data, for generation and export; None for data without text."""

    @abstractmethod
    def next_batch(self, global_batch: int, rank: int = 0, world_size: int = 1) -> Batch:
        """The next global batch of `global_batch` sequences; return this rank's rows
        [rank * n, (rank + 1) * n) with n = global_batch / world_size. Advances the position by
        the whole global batch, on every rank alike."""

    @abstractmethod
    def validation_batches(
        self, n_batches: int, batch_size: int, seed: int | None = None
    ) -> list[Batch]:
        """The same `n_batches` held-out batches every time: the held-out set's first rows, or
        (seed given) the rows `held_out_rows` draws with `seed`, all of them in batches of
        `batch_size` (the last one shorter) when a finite held-out set holds fewer."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """The position, as plain ints/floats/strings/lists (saved in checkpoints)."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def describe(self) -> str:
        """What the data is, in a few words, for the run's output and summary.json."""
        return type(self).__name__

    def check_training_data(self) -> None:
        """Refuse, before the first step, training data that is not what it was made as (a
        prepared shard changed since `prepare`); nothing to check for generated data."""
        return None

    def training_data_checked(self) -> None:
        """Another process on this machine checked the same training data: take its word and
        do not check it again (one process per machine reads every shard, not all of them)."""
        return None

    def save_tokenizer(self, directory: Path) -> bool:
        """Write this data's tokenizer into `directory` (a run keeps its own copy, so serving
        it needs no data); False when the data has none."""
        if self.tokenizer is None:
            return False
        self.tokenizer.save(directory)
        return True


def rank_rows(global_batch: int, rank: int, world_size: int) -> range:
    """The rows of a global batch that belong to `rank`."""
    if global_batch % world_size:
        raise UserError(
            f"train.batch_size = {global_batch} is not divisible by the {world_size} ranks"
        )
    n = global_batch // world_size
    return range(rank * n, (rank + 1) * n)


GENERATED_ROWS = 1 << 40
"""Rows a draw picks from when the held-out set is generated on demand (no end to it)."""


def held_out_rows(count: int, seed: int, population: int | None = None) -> list[int]:
    """`count` distinct row indices of a held-out set of `population` rows (None: generated,
    unbounded), drawn by `seed`; every row when the set holds fewer than `count`.

    The draw of m rows is the first m of any longer draw with the same seed, so runs that score
    different numbers of rows (another batch size) still share the rows they have in common."""
    rng = np.random.default_rng([seed, 0x5E1D])
    if population is not None:
        return [int(i) for i in rng.permutation(population)[:count]]
    rows: dict[int, None] = {}  # ordered and distinct; a repeat in 2^40 is all but impossible
    while len(rows) < count:
        rows.update(dict.fromkeys(int(i) for i in rng.integers(0, GENERATED_ROWS, count)))
    return list(rows)[:count]


def in_batches(rows: Sequence[int], batch_size: int) -> list[list[int]]:
    """Consecutive batches of `batch_size` rows (the last one shorter if they do not divide)."""
    return [list(rows[i : i + batch_size]) for i in range(0, len(rows), batch_size)]
