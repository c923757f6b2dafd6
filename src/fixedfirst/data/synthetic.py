"""A seeded toy language for tests and smoke runs: no files, learnable in a few hundred steps.

Each token has `branching` possible successors (a random sparse transition table drawn from the
data seed), so the best achievable NLL is about ln(branching) nats and a model that learns the
table shows a clearly falling loss. Sequence i is generated from a generator seeded by
(seed, i) alone, so the position is one integer and any batch can be regenerated.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fixedfirst.config import RunConfig
from fixedfirst.data.registry import DataKind, register_kind
from fixedfirst.data.source import Batch, BatchSource, held_out_rows, in_batches, rank_rows

_VALIDATION_OFFSET = 1 << 40  # validation sequences live far away from training indices


class SyntheticSource(BatchSource):
    def __init__(self, vocab_size: int, seq_len: int, seed: int = 0, branching: int = 4) -> None:
        self.vocab_size = vocab_size
        self.seq_len = seq_len
        self.seed = seed
        rng = np.random.default_rng([seed, 0xC0FFEE])
        self.successors = rng.integers(0, vocab_size, size=(vocab_size, branching))
        self.position = 0

    def _sequence(self, index: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, index])
        seq = np.empty(self.seq_len + 1, dtype=np.int64)
        seq[0] = rng.integers(self.vocab_size)
        choices = rng.integers(0, self.successors.shape[1], size=self.seq_len)
        for t in range(self.seq_len):
            seq[t + 1] = self.successors[seq[t], choices[t]]
        return seq

    def _batch(self, indices) -> Batch:
        data = torch.from_numpy(np.stack([self._sequence(i) for i in indices]))
        return Batch(data[:, :-1].contiguous(), data[:, 1:].contiguous())

    def next_batch(self, global_batch: int, rank: int = 0, world_size: int = 1) -> Batch:
        rows = rank_rows(global_batch, rank, world_size)
        batch = self._batch([self.position + r for r in rows])
        self.position += global_batch
        return batch

    def validation_batches(
        self, n_batches: int, batch_size: int, seed: int | None = None
    ) -> list[Batch]:
        count = n_batches * batch_size
        rows = range(count) if seed is None else held_out_rows(count, seed)
        return [
            self._batch([_VALIDATION_OFFSET + i for i in batch])
            for batch in in_batches(rows, batch_size)
        ]

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = int(state["position"])

    def describe(self) -> str:
        """Says it is the built-in toy: it is what a configuration without [data] trains on."""
        return (
            f"the built-in synthetic language, a seeded toy for tests and smoke runs (vocab "
            f"{self.vocab_size}, seed {self.seed}; data.kind = 'synthetic', the default when "
            "the configuration names no data)"
        )


def _build(config: RunConfig) -> SyntheticSource:
    return SyntheticSource(config.model.vocab_size, config.train.seq_len, config.data.seed)


KIND = DataKind(
    name="synthetic",
    summary="a seeded toy language (a sparse random transition table) for tests and smoke runs",
    build=_build,
)
register_kind(KIND)
