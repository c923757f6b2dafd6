"""The chains task: generated labels checked by an independent interpreter, difficulty that is
what it says, determinism, the batch source and the task metric."""

from __future__ import annotations

import pytest
import torch

from fixedfirst.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from fixedfirst.data.registry import build_source, data_kind
from fixedfirst.errors import UserError
from fixedfirst.model import LoopedTransformer
from fixedfirst.model.loss import IGNORE_INDEX
from fixedfirst.tasks.chains.bands import bands_of
from fixedfirst.tasks.chains.program import (
    SELECTION_STREAM,
    ChainsOptions,
    evaluation_program,
    training_program,
)
from fixedfirst.tasks.chains.sets import SETS
from fixedfirst.tasks.chains.source import ChainsSource, evaluation_seed, evaluation_set

OPTIONS = ChainsOptions(statements=24, values=16, max_ops=5, eval_ops=15)


def interpret(words: list[str], values: int) -> tuple[list[str], list[int]]:
    """Run the program word by word: a number starts a chain, '+1' adds one, 'neg' negates,
    both modulo `values`. Written from the task's definition, not from the generator."""
    labels, difficulty = [], []
    value, done = None, 0
    for word in words:
        if word.isdigit():
            value, done = int(word), 0
        elif word == "+1" and value is not None:
            value, done = (value + 1) % values, done + 1
        elif word == "neg" and value is not None:
            value, done = (values - value) % values, done + 1
        else:
            raise AssertionError(f"not a program word here: {word!r}")
        labels.append(str(value))
        difficulty.append(done)
    return labels, difficulty


def programs():
    for index in range(300):
        yield training_program(OPTIONS, 7, 0, index)
    for index in range(100):
        yield evaluation_program(OPTIONS, 7, index)


def test_every_label_matches_an_independent_interpreter():
    for program in programs():
        assert len(program.words) == OPTIONS.statements
        labels, difficulty = interpret(program.words, OPTIONS.values)
        assert program.labels == labels
        assert program.difficulty == difficulty


def test_training_stays_in_range_and_evaluation_holds_one_long_chain():
    for index in range(300):
        assert max(training_program(OPTIONS, 1, 0, index).difficulty) <= OPTIONS.max_ops
    for index in range(100):
        program = evaluation_program(OPTIONS, 1, index)
        chain = program.long_chain
        assert chain is not None and len(chain) == OPTIONS.eval_ops + 1
        assert [program.difficulty[i] for i in chain] == list(range(OPTIONS.eval_ops + 1))
        assert program.words[chain.start].isdigit()
        rest = [d for i, d in enumerate(program.difficulty) if i not in chain]
        assert max(rest, default=0) <= OPTIONS.max_ops


def flip(word: str) -> str:
    return {"+1": "neg", "neg": "+1"}[word]


def test_a_label_needs_every_operation_before_it_and_no_other():
    """Difficulty d means d sequential updates: changing any one of the d operations (or the
    start value) of a label's chain changes the label, and nothing outside the chain does.
    (+1 and neg never agree on a value mod an even number, and every operation is a bijection,
    so a change anywhere before the label carries through.)"""
    for index in range(40):
        program = evaluation_program(OPTIONS, 3, index)
        chain = program.long_chain
        assert chain is not None
        end = chain.stop - 1  # the label of the hardest difficulty
        for i in range(chain.start + 1, end + 1):
            words = list(program.words)
            words[i] = flip(words[i])
            assert interpret(words, OPTIONS.values)[0][end] != program.labels[end]
        words = list(program.words)
        words[chain.start] = str((int(words[chain.start]) + 1) % OPTIONS.values)
        assert interpret(words, OPTIONS.values)[0][end] != program.labels[end]
        for i in [i for i in range(len(words)) if i not in chain and not words[i].isdigit()]:
            words = list(program.words)
            words[i] = flip(words[i])
            assert interpret(words, OPTIONS.values)[0][end] == program.labels[end]


def test_no_label_of_difficulty_one_or_more_is_its_own_input():
    for program in programs():
        for word, label, d in zip(program.words, program.labels, program.difficulty, strict=True):
            assert (word == label) == (d == 0)


def test_sequences_are_a_pure_function_of_seed_and_index():
    a = [training_program(OPTIONS, 5, 0, i) for i in (0, 9, 3)]
    b = [training_program(OPTIONS, 5, 0, i) for i in (0, 9, 3)]
    assert a == b
    assert training_program(OPTIONS, 6, 0, 0) != a[0]
    assert training_program(OPTIONS, 5, 1, 0) != a[0]  # validation is another stream
    assert evaluation_program(OPTIONS, 5, 2) == evaluation_program(OPTIONS, 5, 2)


def config(**data_options) -> RunConfig:
    options = {"statements": 24, "max_ops": 5, "eval_ops": 15, **data_options}
    return RunConfig(
        model=ModelConfig(vocab_size=21, d_model=32, n_heads=4, n_core=1, max_seq_len=25),
        train=TrainConfig(seq_len=25, batch_size=4),
        data=DataConfig(kind="chains", seed=2, options=options),
    )


def test_the_source_encodes_programs_and_resumes_where_it_was():
    source = build_source(config())
    assert isinstance(source, ChainsSource) and source.vocab_size == 21
    first = source.next_batch(4)
    assert first.inputs.shape == (4, 25) and (first.inputs[:, 0] == source.tokenizer.bos_id).all()
    assert (first.targets[:, 0] == IGNORE_INDEX).all() and (first.targets[:, 1:] >= 0).all()
    state = source.state_dict()
    second = source.next_batch(4)
    again = build_source(config())
    again.load_state_dict(state)
    assert torch.equal(again.next_batch(4).inputs, second.inputs)
    words = source.tokenizer.decode(first.inputs[0, 1:].tolist()).split()
    labels, _ = interpret(words, 16)
    assert source.tokenizer.decode(first.targets[0, 1:].tolist()).split() == labels


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"max_ops": 30}, "data.chains.max_ops: must be in [0, statements - 1 = 23]"),
        ({"eval_ops": 3}, "data.chains.eval_ops: must be in [max_ops = 5"),
        ({"values": 2}, "data.chains.values: must be >= 3"),
    ],
)
def test_impossible_options_are_one_line_errors(change, message):
    with pytest.raises(UserError, match=message.replace("[", r"\[").replace("(", r"\(")):
        build_source(config(**change))


def test_seq_len_and_vocabulary_must_fit():
    wrong = config()
    wrong.train.seq_len = 20
    with pytest.raises(UserError, match="set train.seq_len = 25"):
        build_source(wrong)
    small = config()
    small.model.vocab_size = 10
    with pytest.raises(UserError, match="set model.vocab_size = 21"):
        build_source(small)


def test_bands_split_the_training_range_and_what_lies_beyond():
    labels = [(b.label, b.in_range) for b in bands_of(ChainsOptions())]
    assert labels == [("0..4", True), ("5..8", True), ("9..16", False), ("17..32", False)]
    assert [b.label for b in bands_of(OPTIONS)] == ["0..2", "3..5", "6..10", "11..15"]


def test_task_metric_scores_one_label_of_each_difficulty_per_sequence():
    torch.manual_seed(0)
    run_config = config()
    model = LoopedTransformer(run_config.model).eval()
    report = data_kind("chains").evaluate(model, run_config, [1, 3], 8)
    assert report.record["sequences"] == 8
    accuracy = report.record["accuracy"]
    assert set(accuracy) == {"1", "3"} and len(accuracy["1"]) == 16
    seed = evaluation_seed(2, run_config.train.seed)
    evaluation = evaluation_set(ChainsOptions(statements=24, max_ops=5, eval_ops=15), seed, 8)
    with torch.no_grad():
        predicted = model(evaluation.batch.inputs, 3).argmax(-1).gather(1, evaluation.positions)
    expected = evaluation.batch.targets.gather(1, evaluation.positions)
    assert accuracy["3"] == pytest.approx((predicted == expected).float().mean(0).tolist())
    assert set(report.scores) == {1, 3} and "3..5" in report.score_name


@pytest.mark.parametrize("name", list(SETS))
def test_every_named_set_is_labelled_right_and_holds_what_it_says(name):
    spec = SETS[name]
    options = spec.options(OPTIONS)
    for index in range(60):
        program = evaluation_program(options, 4, index, pattern=spec.pattern)
        labels, difficulty = interpret(program.words, OPTIONS.values)
        assert program.labels == labels and program.difficulty == difficulty
        chain = program.long_chain
        assert chain is not None and len(chain) == options.eval_ops + 1
        operations = [program.words[i] for i in chain][1:]
        if spec.pattern:
            assert operations == [
                spec.pattern[i % len(spec.pattern)] for i in range(len(operations))
            ]
    if spec.longest:
        assert options.eval_ops == OPTIONS.statements - 1
    if spec.neg_probability is not None:  # every chain draws neg at the set's rate
        words = [w for i in range(200) for w in evaluation_program(options, 4, i).words]
        ops = [w for w in words if not w.isdigit()]
        assert ops.count("neg") / len(ops) == pytest.approx(spec.neg_probability, abs=0.03)


def test_a_pattern_changes_only_the_long_chain():
    plain = evaluation_program(OPTIONS, 9, 3)
    patterned = evaluation_program(OPTIONS, 9, 3, pattern=("neg",))
    chain = plain.long_chain
    assert chain == patterned.long_chain
    outside = [i for i in range(OPTIONS.statements) if i not in chain]
    assert [plain.words[i] for i in outside] == [patterned.words[i] for i in outside]
    with pytest.raises(ValueError, match="pattern"):
        evaluation_program(OPTIONS, 9, 3, pattern=("times2",))


def test_evaluation_draws_differ_by_training_seed_and_by_stream():
    a = evaluation_set(OPTIONS, evaluation_seed(0, 0), 8)
    b = evaluation_set(OPTIONS, evaluation_seed(0, 1), 8)
    again = evaluation_set(OPTIONS, evaluation_seed(0, 0), 8)
    selection = evaluation_set(OPTIONS, evaluation_seed(0, 0), 8, stream=SELECTION_STREAM)
    assert torch.equal(a.batch.inputs, again.batch.inputs)
    assert not torch.equal(a.batch.inputs, b.batch.inputs)
    assert not torch.equal(a.batch.inputs, selection.batch.inputs)
