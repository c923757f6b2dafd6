"""Chains of operations on a value: a task whose every answer needs as many steps as it has
operations (docs/design.md §5).

A sequence is `<bos>` and chains of a start value followed by `+1` and `neg` operations (mod
`values`), every position labelled with its chain's value so far. The operations do not commute,
so a label after d operations needs d updates in order and serving depth decides the answer.
Every sequence is a pure function of (seed, stream, index), numpy only, so a test can check it
against an independent interpreter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fixedfirst.config import require

PLUS_ONE, NEG = "+1", "neg"
OPERATIONS = (PLUS_ONE, NEG)
TRAIN_STREAM, VALIDATION_STREAM, EVALUATION_STREAM, SELECTION_STREAM = 0, 1, 2, 3
"""Generator streams: training rows, training-range validation rows, the evaluation (test) set, and
the selection set (evaluation sequences of the same kind, drawn apart from the test set, on which
a depth may be chosen without looking at the test labels)."""


@dataclass
class ChainsOptions:
    """The chains task: `[data.chains]`."""

    SECTION: ClassVar[str] = "data.chains"

    statements: int = 40
    """Tokens after `<bos>` in every sequence (train.seq_len = statements + 1)."""
    values: int = 16
    """Values are 0..values-1; +1 and neg are taken modulo `values`."""
    max_ops: int = 8
    """Training chains have 0..max_ops operations: the training range of difficulty."""
    eval_ops: int = 32
    """Operations of the long chain in every evaluation sequence (difficulties 0..eval_ops)."""
    neg_probability: float = 0.5
    """Probability that an operation is `neg` rather than `+1`."""

    def __post_init__(self) -> None:
        s = self.SECTION
        require(self.values >= 3, f"{s}.values", f"must be >= 3, got {self.values}")
        require(self.statements >= 2, f"{s}.statements", f"must be >= 2, got {self.statements}")
        require(
            0 <= self.max_ops < self.statements,
            f"{s}.max_ops",
            f"must be in [0, statements - 1 = {self.statements - 1}], got {self.max_ops}",
        )
        require(
            self.max_ops <= self.eval_ops < self.statements,
            f"{s}.eval_ops",
            f"must be in [max_ops = {self.max_ops}, statements - 1 = {self.statements - 1}] "
            f"(the long chain and its start value fit in one sequence), got {self.eval_ops}",
        )
        require(
            0.0 <= self.neg_probability <= 1.0,
            f"{s}.neg_probability",
            f"must be in [0, 1], got {self.neg_probability}",
        )

    @property
    def seq_len(self) -> int:
        return self.statements + 1

    def words(self) -> list[str]:
        """Every word a sequence or a label can hold (besides the tokenizer's specials)."""
        return [*OPERATIONS, *(str(v) for v in range(self.values))]


@dataclass(frozen=True)
class Program:
    """One sequence: its words after `<bos>`, and for every one of them the label (the chain's
    value, as a word) and the difficulty (operations applied so far)."""

    words: list[str]
    labels: list[str]
    difficulty: list[int]
    long_chain: range | None = None
    """Evaluation sequences: the statement indices of the long chain (start value first)."""


def apply(operation: str, value: int, values: int) -> int:
    return (value + 1) % values if operation == PLUS_ONE else (-value) % values


def _chain_lengths(options: ChainsOptions, rng: np.random.Generator, total: int) -> list[int]:
    """Statements per chain (1 + operations), drawn until `total` statements are filled."""
    lengths: list[int] = []
    while total > 0:
        length = 1 + int(rng.integers(0, options.max_ops + 1))
        lengths.append(min(length, total))
        total -= lengths[-1]
    return lengths


def _write(
    options: ChainsOptions,
    rng: np.random.Generator,
    lengths: list[int],
    patterned: int | None = None,
    pattern: tuple[str, ...] = (),
) -> Program:
    """The chains of `lengths`, one after another; chain number `patterned` (if any) applies
    `pattern`'s operations in turn, repeated, instead of random ones."""
    words: list[str] = []
    labels: list[str] = []
    difficulty: list[int] = []
    for chain, length in enumerate(lengths):
        value = int(rng.integers(0, options.values))
        words.append(str(value))
        labels.append(str(value))
        difficulty.append(0)
        negs = rng.random(length - 1) < options.neg_probability
        if chain == patterned:
            negs = np.array([pattern[i % len(pattern)] == NEG for i in range(length - 1)])
        for ops, neg in enumerate(negs.tolist(), start=1):
            operation = NEG if neg else PLUS_ONE
            value = apply(operation, value, options.values)
            words.append(operation)
            labels.append(str(value))
            difficulty.append(ops)
    return Program(words, labels, difficulty)


def training_program(options: ChainsOptions, seed: int, stream: int, index: int) -> Program:
    """Sequence `index` of a training-range stream (training or validation)."""
    rng = np.random.default_rng([seed, stream, index, 0xC4A1])
    return _write(options, rng, _chain_lengths(options, rng, options.statements))


def evaluation_program(
    options: ChainsOptions,
    seed: int,
    index: int,
    stream: int = EVALUATION_STREAM,
    pattern: tuple[str, ...] = (),
) -> Program:
    """Sequence `index` of an evaluation stream: one chain of eval_ops operations placed at a
    random place among training-range chains; its operations follow `pattern` (repeated) when
    one is given, else they are drawn like every other chain's."""
    if any(op not in OPERATIONS for op in pattern):
        raise ValueError(f"a pattern holds operations {OPERATIONS}, got {pattern}")
    rng = np.random.default_rng([seed, stream, index, 0xC4A1])
    long = options.eval_ops + 1
    lengths = _chain_lengths(options, rng, options.statements - long)
    slot = int(rng.integers(0, len(lengths) + 1))
    lengths.insert(slot, long)
    program = _write(options, rng, lengths, slot if pattern else None, pattern)
    start = sum(lengths[:slot])
    return Program(program.words, program.labels, program.difficulty, range(start, start + long))
