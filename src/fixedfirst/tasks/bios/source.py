"""Training batches for the bios task: shuffled biographies, one (or a few) whole ones per row.

Sentence order and templates are redrawn every time a person is seen and people are visited in a
new order every epoch, so the model must store facts rather than copy them. Rows hold whole
biographies (all of one length), not a packed stream: one per row trains best per FLOP here.
The position is the number of biographies consumed; validation is a separate fixed stream of
the same people, since memorisation has no held-out set. docs/design.md §5 says why.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fixedfirst.config import RunConfig
from fixedfirst.data.registry import kind_options
from fixedfirst.data.source import Batch, BatchSource, held_out_rows, in_batches, rank_rows
from fixedfirst.errors import UserError
from fixedfirst.model.loss import IGNORE_INDEX
from fixedfirst.tasks.bios.templates import TEMPLATES, TEMPLATES_PER_ATTRIBUTE, render
from fixedfirst.tasks.bios.tokenizer import BiosTokenizer
from fixedfirst.tasks.bios.world import (
    ATTRIBUTES,
    BiosOptions,
    Pools,
    World,
    build_pools,
    build_world,
)

TRAIN_STREAM = 0
VALIDATION_STREAM = 1


def biography_length(pools: Pools) -> int:
    """Tokens in the longest possible biography: <bos> plus each attribute's longest sentence."""
    name = " ".join([pools.first_names[0], pools.middle_names[0], pools.last_names[0]])
    total = 1
    for attribute in ATTRIBUTES:
        longest_value = max(pools.values[attribute], key=lambda v: len(v.split()))
        total += max(
            len(render(attribute, t, name, longest_value).text.split())
            for t in range(len(TEMPLATES[attribute]))
        )
    return total


def bios_vocab_size(options: BiosOptions, seed: int = 0) -> int:
    """The smallest model.vocab_size that covers the bios vocabulary of a world."""
    return BiosTokenizer.for_pools(build_pools(options, seed)).vocab_size


def bios_seq_len(options: BiosOptions, seed: int = 0) -> int:
    """The train.seq_len that holds exactly one biography per row (no padding)."""
    return biography_length(build_pools(options, seed))


class BiosSource(BatchSource):
    tokenizer: BiosTokenizer

    def __init__(
        self,
        world: World,
        seq_len: int,
        order_seed: int = 0,
        tokenizer: BiosTokenizer | None = None,
    ) -> None:
        self.world = world
        self.tokenizer = tokenizer or BiosTokenizer.for_pools(world.pools)
        self.vocab_size = self.tokenizer.vocab_size
        self.seq_len = seq_len
        self.order_seed = order_seed
        self.document_length = biography_length(world.pools)
        if seq_len < self.document_length:
            raise UserError(
                f"train.seq_len = {seq_len} cannot hold one biography ({self.document_length} "
                f"tokens); set train.seq_len = {self.document_length}"
            )
        self.per_row = seq_len // self.document_length
        self.position = 0
        self._epoch_orders: dict[tuple[int, int], np.ndarray] = {}

    @classmethod
    def from_config(cls, config: RunConfig) -> BiosSource:
        """The source of a run; checks that the model's vocabulary covers the task's."""
        world = build_world(kind_options(config), config.data.seed)
        source = cls(world, config.train.seq_len, config.train.seed)
        if config.model.vocab_size < source.vocab_size:
            raise UserError(
                f"model.vocab_size = {config.model.vocab_size} is below the {source.vocab_size} "
                f"tokens of the bios vocabulary; set model.vocab_size = {source.vocab_size}"
            )
        return source

    # -- documents -------------------------------------------------------------------------------

    def person(self, stream: int, index: int) -> int:
        """Whose biography document `index` of `stream` is: epoch by epoch, shuffled."""
        epoch, offset = divmod(index, self.world.people)
        key = (stream, epoch)
        if key not in self._epoch_orders:
            if len(self._epoch_orders) > 4:  # only the current epochs are ever needed
                self._epoch_orders.clear()
            rng = np.random.default_rng([self.order_seed, stream, 0xE90C, epoch])
            self._epoch_orders[key] = rng.permutation(self.world.people)
        return int(self._epoch_orders[key][offset])

    def biography(self, stream: int, index: int) -> list[int]:
        """Token ids of document `index` of `stream`: <bos>, then six shuffled sentences."""
        person = self.person(stream, index)
        rng = np.random.default_rng([self.order_seed, stream, index])
        order = rng.permutation(len(ATTRIBUTES))
        templates = rng.integers(0, TEMPLATES_PER_ATTRIBUTE, size=len(ATTRIBUTES))
        name = self.world.names[person]
        tokens = [self.tokenizer.bos_id]
        for a in order.tolist():
            attribute = ATTRIBUTES[a]
            value = self.world.value(person, attribute)
            tokens += self.tokenizer.encode(render(attribute, int(templates[a]), name, value).text)
        return tokens

    def _rows(self, stream: int, first_documents: list[int]) -> Batch:
        """One row per entry: `per_row` consecutive biographies starting at that document."""
        inputs = torch.full((len(first_documents), self.seq_len), self.tokenizer.pad_id)
        targets = torch.full((len(first_documents), self.seq_len), IGNORE_INDEX)
        for r, first in enumerate(first_documents):
            column = 0
            for index in range(first, first + self.per_row):
                tokens = self.biography(stream, index)
                n = len(tokens)
                inputs[r, column : column + n] = torch.tensor(tokens)
                targets[r, column : column + n] = torch.tensor([*tokens[1:], self.tokenizer.eos_id])
                column += n
        return Batch(inputs, targets)

    # -- BatchSource -----------------------------------------------------------------------------

    def next_batch(self, global_batch: int, rank: int = 0, world_size: int = 1) -> Batch:
        rows = rank_rows(global_batch, rank, world_size)
        batch = self._rows(TRAIN_STREAM, [self.position + r * self.per_row for r in rows])
        self.position += global_batch * self.per_row
        return batch

    def validation_batches(
        self, n_batches: int, batch_size: int, seed: int | None = None
    ) -> list[Batch]:
        count = n_batches * batch_size
        rows = range(count) if seed is None else held_out_rows(count, seed)
        return [
            self._rows(VALIDATION_STREAM, [r * self.per_row for r in batch])
            for batch in in_batches(rows, batch_size)
        ]

    def state_dict(self) -> dict[str, Any]:
        return {"documents": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = int(state["documents"])

    def describe(self) -> str:
        return (
            f"bios: {self.world.people} people, {self.world.bits_per_person:.2f} bits each, "
            f"vocabulary {self.vocab_size}, {self.per_row} biography(ies) of "
            f"{self.document_length} tokens a row"
        )
