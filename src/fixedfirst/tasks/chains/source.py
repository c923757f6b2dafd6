"""Batches of the chains task (`[data] kind = "chains"`), and its evaluation set.

A row is one sequence: `<bos>` and `statements` words, each position labelled with its chain's
value (the label sits at the position of the word that produced it; `<bos>` is not scored). The
training stream is drawn from (data seed, train seed) and the row's index, so the resumable
position is one integer; validation rows come from their own stream of training-range sequences.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fixedfirst.config import RunConfig
from fixedfirst.data.registry import kind_options
from fixedfirst.data.source import Batch, BatchSource, held_out_rows, in_batches, rank_rows
from fixedfirst.data.tokenizer import WordTokenizer
from fixedfirst.errors import UserError
from fixedfirst.model.loss import IGNORE_INDEX
from fixedfirst.tasks.chains.program import (
    EVALUATION_STREAM,
    TRAIN_STREAM,
    VALIDATION_STREAM,
    ChainsOptions,
    Program,
    evaluation_program,
    training_program,
)
from fixedfirst.tasks.chains.sets import SETS, STANDARD, EvaluationSpec


def chains_tokenizer(options: ChainsOptions) -> WordTokenizer:
    return WordTokenizer(options.words())


def encode(programs: list[Program], tokenizer: WordTokenizer) -> Batch:
    """(B, 1 + statements) inputs and labels; position 0 is `<bos>`, not scored."""
    inputs = torch.tensor(
        [[tokenizer.bos_id, *(tokenizer.ids[w] for w in p.words)] for p in programs]
    )
    labels = torch.tensor([[IGNORE_INDEX, *(tokenizer.ids[w] for w in p.labels)] for p in programs])
    return Batch(inputs, labels)


@dataclass
class EvaluationSet:
    """Sequences with one long chain each; `positions[n, d]` is where sequence n's long chain
    has applied d operations (the label there has difficulty d)."""

    batch: Batch
    positions: torch.Tensor

    @property
    def sequences(self) -> int:
        return self.positions.shape[0]


def evaluation_seed(data_seed: int, train_seed: int) -> int:
    """The seed of a run's evaluation sequences: its world (data seed) and its training seed, so
    that every seed of an experiment is scored on its own draw of held-out sequences (an interval
    over seeds then covers the held-out sampling too) and every schedule of one seed on the same
    one (same-seed differences stay paired)."""
    return int(np.random.SeedSequence([data_seed, train_seed, 0xE7A1]).generate_state(1)[0])


def evaluation_set(
    options: ChainsOptions,
    seed: int,
    sequences: int,
    spec: EvaluationSpec = SETS[STANDARD],
    stream: int = EVALUATION_STREAM,
) -> EvaluationSet:
    """`sequences` sequences of the named set `spec` from `stream` (test or selection)."""
    options = spec.options(options)
    tokenizer = chains_tokenizer(options)
    programs = [
        evaluation_program(options, seed, i, stream, spec.pattern) for i in range(sequences)
    ]
    positions = torch.tensor(
        [[1 + s for s in p.long_chain] for p in programs if p.long_chain is not None]
    )
    return EvaluationSet(encode(programs, tokenizer), positions)


class ChainsSource(BatchSource):
    tokenizer: WordTokenizer

    def __init__(self, options: ChainsOptions, seq_len: int, data_seed: int, order_seed: int):
        if seq_len != options.seq_len:
            raise UserError(
                f"train.seq_len = {seq_len}, but a chains sequence is <bos> + "
                f"data.chains.statements = {options.seq_len} tokens; set train.seq_len = "
                f"{options.seq_len}"
            )
        self.options = options
        self.tokenizer = chains_tokenizer(options)
        self.vocab_size = self.tokenizer.vocab_size
        self.data_seed = data_seed
        self.order_seed = order_seed
        self.position = 0

    @classmethod
    def from_config(cls, config: RunConfig) -> ChainsSource:
        """The source of a run; checks that the model's vocabulary covers the task's."""
        source = cls(
            kind_options(config), config.train.seq_len, config.data.seed, config.train.seed
        )
        if config.model.vocab_size < source.vocab_size:
            raise UserError(
                f"model.vocab_size = {config.model.vocab_size} is below the {source.vocab_size} "
                f"words of the chains task; set model.vocab_size = {source.vocab_size}"
            )
        return source

    def _rows(self, stream: int, seed: int, indices: range | list[int]) -> Batch:
        programs = [training_program(self.options, seed, stream, i) for i in indices]
        return encode(programs, self.tokenizer)

    def next_batch(self, global_batch: int, rank: int = 0, world_size: int = 1) -> Batch:
        rows = rank_rows(global_batch, rank, world_size)
        seed = int(np.random.SeedSequence([self.data_seed, self.order_seed]).generate_state(1)[0])
        batch = self._rows(TRAIN_STREAM, seed, [self.position + r for r in rows])
        self.position += global_batch
        return batch

    def validation_batches(
        self, n_batches: int, batch_size: int, seed: int | None = None
    ) -> list[Batch]:
        count = n_batches * batch_size
        rows = range(count) if seed is None else held_out_rows(count, seed)
        return [
            self._rows(VALIDATION_STREAM, self.data_seed, batch)
            for batch in in_batches(rows, batch_size)
        ]

    def state_dict(self) -> dict[str, Any]:
        return {"sequences": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = int(state["sequences"])

    def describe(self) -> str:
        o = self.options
        return (
            f"chains: {o.statements} statements a sequence, values mod {o.values}, training "
            f"difficulty 0..{o.max_ops}, evaluation chains of {o.eval_ops} operations"
        )
