"""The batch-source interface every task plugs into the trainer through.

A source hands out training batches in a fixed, seeded order and can say where it is
(`state_dict`) and go back there (`load_state_dict`), so a resumed run sees exactly the batches it
would have seen. Each optimizer step asks for the *global* batch; under torchrun every rank gets
its own disjoint rows of it, so a run on N ranks trains on the same data as a run on one.
Validation batches are fixed: the same every time they are asked for.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import torch

from fixedfirst.config import RunConfig
from fixedfirst.errors import UserError


@dataclass
class Batch:
    """inputs (B, T) token ids and targets (B, T): the next token, or -100 where not scored."""

    inputs: torch.Tensor
    targets: torch.Tensor

    def to(self, device: torch.device) -> Batch:
        return Batch(self.inputs.to(device, non_blocking=True), self.targets.to(device))


class BatchSource(ABC):
    """Training batches with a resumable position, and fixed validation batches."""

    vocab_size: int
    """Token ids are in [0, vocab_size); the model's vocab_size must be at least this."""

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


def rank_rows(global_batch: int, rank: int, world_size: int) -> range:
    """The rows of a global batch that belong to `rank`."""
    if global_batch % world_size:
        raise UserError(
            f"train.batch_size = {global_batch} is not divisible by the {world_size} ranks"
        )
    n = global_batch // world_size
    return range(rank * n, (rank + 1) * n)


def build_source(config: RunConfig) -> BatchSource:
    """The batch source named by `[data] kind`."""
    kind = config.data.kind
    if kind == "synthetic":
        from fixedfirst.data.synthetic import SyntheticSource

        return SyntheticSource(config.model.vocab_size, config.train.seq_len, config.data.seed)
    if kind == "tokens":
        from fixedfirst.data.prepared import check_model_vocab
        from fixedfirst.data.tokens import TokenSource

        assert config.data.path is not None  # DataConfig requires it for kind = "tokens"
        check_model_vocab(config.model.vocab_size, config.data.path)
        return TokenSource(config.data.path, config.train.seq_len, seed=config.train.seed)
    if kind == "bios":
        from fixedfirst.tasks.bios.source import BiosSource

        return BiosSource.from_config(config)
    raise UserError(f"data.kind = {kind!r} is not a known data source")
