"""Chains sequences for `fixedfirst inspect`: an evaluation sequence with its labels, or any
words a user types, labelled the way the task labels them.

Every word is scored against its chain's value after it (`program.py`); its answer note is the
label's difficulty, the number of operations applied so far, which is what decides the depth the
label needs.
"""

from __future__ import annotations

from fixedfirst.config import RunConfig
from fixedfirst.data.registry import ScoredSequence, kind_options
from fixedfirst.model.loss import IGNORE_INDEX
from fixedfirst.tasks.chains.program import OPERATIONS, apply, evaluation_program
from fixedfirst.tasks.chains.source import chains_tokenizer, encode


def difficulty_note(operations: int) -> str:
    return "start value" if operations == 0 else f"{operations} operation" + "s" * (operations > 1)


def evaluation_example(config: RunConfig, index: int) -> ScoredSequence:
    """Sequence `index` of the evaluation set (what `eval --task chains` scores), every position
    labelled, the long chain's positions named as such."""
    options = kind_options(config)
    program = evaluation_program(options, config.data.seed, index)
    batch = encode([program], chains_tokenizer(options))
    assert program.long_chain is not None
    long = {1 + s for s in program.long_chain}
    answers = {
        1 + s: ("long chain, " if 1 + s in long else "") + difficulty_note(d)
        for s, d in enumerate(program.difficulty)
    }
    first, last = min(long), max(long)
    return ScoredSequence(
        inputs=batch.inputs[0].tolist(),
        targets=batch.targets[0].tolist(),
        title=(
            f"chains evaluation sequence {index}: a chain of {options.eval_ops} operations at "
            f"positions {first}..{last} among training-range chains (0..{options.max_ops})"
        ),
        answers=answers,
    )


def label_words(config: RunConfig, ids: list[int]) -> ScoredSequence:
    """`<bos>` and words typed by a user, each word labelled with its chain's value: a number
    starts a chain, an operation updates it; an operation before any number has no label."""
    options = kind_options(config)
    tokenizer = chains_tokenizer(options)
    targets = [IGNORE_INDEX]
    answers: dict[int, str] = {}
    value: int | None = None
    operations = 0
    for position, token in enumerate(ids[1:], start=1):
        word = tokenizer.vocab[token]
        if word in OPERATIONS and value is not None:
            value, operations = apply(word, value, options.values), operations + 1
        elif word not in OPERATIONS and word.isdigit():
            value, operations = int(word), 0
        else:  # an operation before any start value, or a special token
            targets.append(IGNORE_INDEX)
            continue
        targets.append(tokenizer.ids[str(value)])
        answers[position] = difficulty_note(operations)
    return ScoredSequence(list(ids), targets, "chains words as typed", answers)
