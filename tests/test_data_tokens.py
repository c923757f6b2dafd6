"""TokenSource: windows, seeded order, resume, rank slices, validation, and the config checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fixedfirst.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from fixedfirst.data.prepare import PrepareOptions, prepare
from fixedfirst.data.prepared import data_vocab_size
from fixedfirst.data.registry import build_source
from fixedfirst.data.shards import open_shard
from fixedfirst.data.tokens import TokenSource
from fixedfirst.errors import UserError

SEQ_LEN = 16


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """~6k byte tokens in several training shards (windows must not cross shard edges)."""
    root = tmp_path_factory.mktemp("tokens")
    corpus = root / "corpus.txt"
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta", "épsilon", "ζeta", "eta", "theta"]
    documents = [" ".join(rng.choice(words, size=rng.integers(5, 40))) for _ in range(200)]
    corpus.write_text("\n%\n".join(documents) + "\n", encoding="utf-8")
    out = root / "data"
    prepare([str(corpus)], out, PrepareOptions(separator="%", val_fraction=0.1, shard_tokens=1000))
    return out


def batches(source: TokenSource, n: int, size: int = 4, rank: int = 0, world: int = 1):
    return [source.next_batch(size, rank, world) for _ in range(n)]


def assert_same(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x.inputs, y.inputs)
        assert torch.equal(x.targets, y.targets)


def test_batches_are_shifted_windows_of_the_training_shards(data):
    source = TokenSource(data, SEQ_LEN, seed=0)
    assert len(source.train.shards) > 2
    stream = [s.tolist() for s in source.train.shards]
    batch = source.next_batch(8)
    assert batch.inputs.shape == batch.targets.shape == (8, SEQ_LEN)
    assert batch.inputs.dtype == torch.int64
    assert torch.equal(batch.inputs[:, 1:], batch.targets[:, :-1])
    for row_in, row_out in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        window = [*row_in, row_out[-1]]
        # Every row is a contiguous piece of one shard, starting at a multiple of seq_len.
        assert any(
            shard[s : s + SEQ_LEN + 1] == window
            for shard in stream
            for s in range(0, len(shard), SEQ_LEN)
        )


def test_one_epoch_visits_every_window_once_then_reshuffles(data):
    source = TokenSource(data, SEQ_LEN, seed=3)
    n = len(source.train)
    first = [source._window_at(p) for p in range(n)]
    second = [source._window_at(p) for p in range(n, 2 * n)]
    assert sorted(first) == list(range(n))
    assert sorted(second) == list(range(n))
    assert first != second
    assert first != list(range(n))  # shuffled, not file order
    assert source.position == 0  # looking does not move


def test_same_seed_same_batches_other_seed_other_batches(data):
    a = batches(TokenSource(data, SEQ_LEN, seed=1), 5)
    b = batches(TokenSource(data, SEQ_LEN, seed=1), 5)
    c = batches(TokenSource(data, SEQ_LEN, seed=2), 5)
    assert_same(a, b)
    assert not torch.equal(a[0].inputs, c[0].inputs)


def test_resume_continues_exactly(data):
    n = len(TokenSource(data, SEQ_LEN).train)
    size = 7
    k = n // size + 2  # resume after crossing into the second epoch
    uninterrupted = TokenSource(data, SEQ_LEN, seed=5)
    reference = batches(uninterrupted, k + 4, size)

    first = TokenSource(data, SEQ_LEN, seed=5)
    batches(first, k, size)
    state = first.state_dict()
    assert state["position"] == k * size
    resumed = TokenSource(data, SEQ_LEN, seed=5)
    resumed.load_state_dict(state)
    assert_same(batches(resumed, 4, size), reference[k:])
    assert resumed.epoch > 1


def test_ranks_get_disjoint_rows_of_the_same_global_batch(data):
    single = TokenSource(data, SEQ_LEN, seed=0)
    rank0, rank1 = TokenSource(data, SEQ_LEN, seed=0), TokenSource(data, SEQ_LEN, seed=0)
    for _ in range(3):
        whole = single.next_batch(8)
        part0, part1 = rank0.next_batch(8, 0, 2), rank1.next_batch(8, 1, 2)
        assert part0.inputs.shape[0] == part1.inputs.shape[0] == 4
        assert torch.equal(torch.cat([part0.inputs, part1.inputs]), whole.inputs)
        assert torch.equal(torch.cat([part0.targets, part1.targets]), whole.targets)
    assert rank0.position == rank1.position == single.position == 24
    with pytest.raises(UserError, match="not divisible"):
        rank0.next_batch(7, 0, 2)


def test_validation_batches_are_fixed_and_from_the_validation_split(data):
    source = TokenSource(data, SEQ_LEN, seed=0)
    first = source.validation_batches(3, 4)
    source.next_batch(16)
    assert_same(first, TokenSource(data, SEQ_LEN, seed=9).validation_batches(3, 4))
    assert_same(first, source.validation_batches(3, 4))
    val = np.concatenate(source.val.shards)
    np.testing.assert_array_equal(first[0].inputs[0].numpy(), val[:SEQ_LEN])
    np.testing.assert_array_equal(first[0].inputs[1].numpy(), val[SEQ_LEN : 2 * SEQ_LEN])


def test_too_many_validation_batches_is_a_user_error(data):
    source = TokenSource(data, SEQ_LEN)
    with pytest.raises(UserError, match="--val-fraction"):
        source.validation_batches(len(source.val) + 1, 1)


def test_state_from_other_data_is_refused(data):
    source = TokenSource(data, SEQ_LEN)
    with pytest.raises(UserError, match="other data"):
        source.load_state_dict({"position": 3, "fingerprint": "0" * 64})


def test_sequence_longer_than_the_data_is_a_user_error(data):
    with pytest.raises(UserError, match=r"train\.seq_len"):
        TokenSource(data, 1_000_000)


def test_damaged_shard_is_a_user_error_naming_it(tmp_path, data):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(data, copy)
    shard = copy / "train-00001.bin"
    shard.write_bytes(shard.read_bytes()[:-10])
    with pytest.raises(UserError, match=r"train-00001\.bin: truncated"):
        TokenSource(copy, SEQ_LEN)


def config(path, vocab_size=257, kind="tokens") -> RunConfig:
    return RunConfig(
        model=ModelConfig(vocab_size=vocab_size, d_model=32, n_heads=4, max_seq_len=64),
        train=TrainConfig(seq_len=SEQ_LEN, seed=4),
        data=DataConfig(kind=kind, path=str(path)),
    )


def test_build_source_makes_a_token_source(data):
    source = build_source(config(data))
    assert isinstance(source, TokenSource)
    assert source.vocab_size == data_vocab_size(data) == 257
    assert source.seed == 4  # the training order follows train.seed
    reference = TokenSource(data, SEQ_LEN, seed=4)
    assert_same([source.next_batch(4)], [reference.next_batch(4)])
    assert int(max(s.max() for s in source.train.shards)) < source.vocab_size


def test_model_vocabulary_smaller_than_the_data_says_what_to_set(data):
    with pytest.raises(UserError) as info:
        build_source(config(data, vocab_size=256))
    message = str(info.value)
    assert "model.vocab_size = 257" in message and "\n" not in message


@pytest.mark.parametrize("make", ["missing", "empty", "foreign"])
def test_unprepared_data_directory_says_how_to_make_it(tmp_path, make):
    path = tmp_path / "data"
    if make != "missing":
        path.mkdir()
    if make == "foreign":
        (path / "meta.json").write_text('{"format": "something else"}')
    with pytest.raises(UserError) as info:
        build_source(config(path))
    message = str(info.value)
    assert str(path) in message and "fixedfirst prepare" in message and "\n" not in message


def test_shard_token_counts_must_match_meta(tmp_path, data):
    import shutil

    from fixedfirst.data.shards import write_shard

    copy = tmp_path / "copy"
    shutil.copytree(data, copy)
    tokens = open_shard(copy / "val-00000.bin")
    write_shard(copy / "val-00000.bin", np.array(tokens[:-1]), tokens.dtype)
    with pytest.raises(UserError, match=r"meta\.json says"):
        TokenSource(copy, SEQ_LEN)


def _flipped_copy(tmp_path, data, shard: str):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(data, copy)
    raw = bytearray((copy / shard).read_bytes())
    raw[len(raw) // 2] ^= 0x01
    (copy / shard).write_bytes(bytes(raw))
    return copy


def test_a_changed_training_shard_is_refused_before_training(tmp_path, data):
    source = TokenSource(_flipped_copy(tmp_path, data, "train-00001.bin"), SEQ_LEN)
    source.validation_batches(1, 4)  # the validation shards are as prepared
    with pytest.raises(UserError, match=r"train-00001\.bin: tokens 0\.\.999 are not what"):
        source.check_training_data()


def test_a_changed_validation_shard_is_refused_when_scored(tmp_path, data):
    source = TokenSource(_flipped_copy(tmp_path, data, "val-00000.bin"), SEQ_LEN)
    source.check_training_data()  # the training shards are as prepared
    with pytest.raises(UserError, match=r"val-00000\.bin: tokens 0\.\..* are not what"):
        source.validation_batches(1, 4)


def test_data_prepared_without_checksums_is_read_and_says_it_is_unchecked(tmp_path, data):
    import json

    copy = _flipped_copy(tmp_path, data, "train-00001.bin")
    meta = json.loads((copy / "meta.json").read_text())
    for split in meta["splits"].values():
        for entry in split["shards"]:
            del entry["blocks"]
    (copy / "meta.json").write_text(json.dumps(meta))
    source = TokenSource(copy, SEQ_LEN)
    source.check_training_data()
    assert "its shards have no checksums" in source.describe()
    assert "no checksums" not in TokenSource(data, SEQ_LEN).describe()
