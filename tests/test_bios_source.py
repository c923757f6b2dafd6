"""The bios batch source: biography content, shuffling, resumable position and rank slices."""

from __future__ import annotations

import pytest
import torch

from fixedfirst.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from fixedfirst.data.registry import build_source
from fixedfirst.errors import UserError
from fixedfirst.tasks.bios.source import BiosSource, bios_seq_len, bios_vocab_size
from fixedfirst.tasks.bios.world import ATTRIBUTES, BiosOptions, build_world

DATA = BiosOptions(people=12, first_names=5, middle_names=5, last_names=5, cities=7)
WORLD = build_world(DATA)
LENGTH = bios_seq_len(DATA)


def source(seq_len: int = LENGTH, seed: int = 0) -> BiosSource:
    return BiosSource(WORLD, seq_len, order_seed=seed)


def sentences(source: BiosSource, row: torch.Tensor) -> list[str]:
    text = source.tokenizer.decode(row[row != source.tokenizer.pad_id].tolist())
    return [s.strip() for s in text.replace("<bos>", "").split(" .") if s.strip()]


def test_a_row_is_one_biography_with_every_fact_once():
    s = source()
    batch = s.next_batch(12)
    assert batch.inputs.shape == batch.targets.shape == (12, LENGTH)
    assert (batch.inputs[:, 0] == s.tokenizer.bos_id).all()
    assert (batch.inputs != s.tokenizer.pad_id).all()  # equal-length biographies: no padding
    torch.testing.assert_close(batch.targets[:, :-1], batch.inputs[:, 1:])
    assert (batch.targets[:, -1] == s.tokenizer.eos_id).all()
    people = []
    for row in batch.inputs:
        lines = sentences(s, row)
        assert len(lines) == 6
        name = " ".join(lines[0].split()[:3])
        person = WORLD.names.index(name)
        people.append(person)
        values = [WORLD.value(person, a) for a in ATTRIBUTES]
        for line in lines:
            assert line.startswith(name + " ")
        # each attribute's value ends exactly one sentence
        assert sorted(v for v in values if any(line.endswith(" " + v) for line in lines)) == sorted(
            values
        )
    assert sorted(people) == list(range(12))  # one epoch: every person once
    assert people != list(range(12))  # ... in a shuffled order


def test_templates_and_sentence_order_are_redrawn_each_visit():
    s = source()
    epochs = [s.next_batch(12) for _ in range(4)]
    seen: dict[int, set[tuple[str, ...]]] = {}
    for batch in epochs:
        for row in batch.inputs:
            lines = tuple(sentences(s, row))
            seen.setdefault(WORLD.names.index(" ".join(lines[0].split()[:3])), set()).add(lines)
    assert len(seen) == 12
    assert all(len(versions) == 4 for versions in seen.values())


def test_resume_gives_identical_batches():
    a = source(seed=5)
    for _ in range(3):
        a.next_batch(8)
    state = a.state_dict()
    expected = [a.next_batch(8) for _ in range(2)]
    b = source(seed=5)
    b.load_state_dict(state)
    got = [b.next_batch(8) for _ in range(2)]
    for e, g in zip(expected, got, strict=True):
        assert torch.equal(e.inputs, g.inputs) and torch.equal(e.targets, g.targets)
    fresh = source(seed=5).next_batch(8)
    assert not torch.equal(fresh.inputs, expected[0].inputs)
    other_seed = source(seed=6)
    other_seed.load_state_dict(state)
    assert not torch.equal(other_seed.next_batch(8).inputs, expected[0].inputs)


def test_ranks_get_disjoint_rows_of_the_same_global_batch():
    whole = source()
    ranks = [source(), source()]
    for _ in range(3):
        full = whole.next_batch(8)
        parts = [r.next_batch(8, rank=i, world_size=2) for i, r in enumerate(ranks)]
        assert torch.equal(torch.cat([p.inputs for p in parts]), full.inputs)
        assert torch.equal(torch.cat([p.targets for p in parts]), full.targets)
    assert ranks[0].state_dict() == ranks[1].state_dict() == whole.state_dict()
    with pytest.raises(UserError, match="not divisible"):
        whole.next_batch(7, rank=0, world_size=2)


def test_longer_rows_hold_several_whole_biographies_and_pad_the_rest():
    s = source(seq_len=2 * LENGTH + 3)
    batch = s.next_batch(2)
    one = source().next_batch(4)
    assert torch.equal(batch.inputs[:, :LENGTH], one.inputs[0::2])
    assert torch.equal(batch.inputs[:, LENGTH : 2 * LENGTH], one.inputs[1::2])
    assert (batch.inputs[:, 2 * LENGTH :] == s.tokenizer.pad_id).all()
    assert (batch.targets[:, 2 * LENGTH :] == -100).all()
    assert (batch.targets[:, LENGTH - 1] == s.tokenizer.eos_id).all()
    with pytest.raises(UserError, match=f"set train.seq_len = {LENGTH}"):
        source(seq_len=LENGTH - 1)


def test_validation_batches_are_fixed_and_separate_from_training():
    s = source()
    first = s.validation_batches(2, 4)
    s.next_batch(8)
    again = s.validation_batches(2, 4)
    assert all(torch.equal(a.inputs, b.inputs) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[0].inputs, source().next_batch(4).inputs)


def test_build_source_checks_the_model_vocabulary():
    vocab = bios_vocab_size(DATA)
    train = TrainConfig(seq_len=LENGTH)

    def config(vocab_size: int) -> RunConfig:
        model = ModelConfig(vocab_size=vocab_size, max_seq_len=64)
        data = DataConfig(kind="bios", options=vars(DATA))
        return RunConfig(model=model, train=train, data=data)

    built = build_source(config(vocab))
    assert isinstance(built, BiosSource) and built.vocab_size == vocab
    assert built.document_length == LENGTH
    with pytest.raises(UserError, match=f"set model.vocab_size = {vocab}$"):
        build_source(config(vocab - 1))
