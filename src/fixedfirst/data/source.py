"""The batch-source interface every data kind plugs into the trainer through.

A source hands out training batches in a fixed, seeded order and can say where it is
(`state_dict`) and go back there (`load_state_dict`), so a resumed run sees exactly the batches it
would have seen. Each optimizer step asks for the *global* batch; under torchrun every rank gets
its own disjoint rows of it, so a run on N ranks trains on the same data as a run on one.
Validation batches are fixed: the same every time they are asked for. Sources are built from a
run configuration by `fixedfirst.data.registry.build_source`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
        return Batch(self.inputs.to(device, non_blocking=True), self.targets.to(device))

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
    def validation_batches(self, n_batches: int, batch_size: int) -> list[Batch]:
        """The same `n_batches` held-out batches every time."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """The position, as plain ints/floats/strings/lists (saved in checkpoints)."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def describe(self) -> str:
        return type(self).__name__

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
