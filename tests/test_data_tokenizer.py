"""Byte and BPE tokenizers: exact round trips (non-ASCII too), end-of-document ids, save/load."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from fixedfirst.data.tokenizer import (
    EOD_TOKEN,
    BpeTokenizer,
    ByteTokenizer,
    load_tokenizer,
)
from fixedfirst.errors import UserError

SAMPLES = [
    "plain ASCII, with punctuation!",
    "Ünïcödé façade, naïve café",
    "日本語のテキストと emoji 🙂🚀",
    "tabs\tand\nnewlines\r\n and a NUL \0 byte",
    "",
]
CORPUS = [
    f"Document {i}: the quick brown fox jumps over the lazy dog; café crème number {i * 7}.\n"
    for i in range(300)
]


@pytest.fixture(scope="module")
def bpe() -> BpeTokenizer:
    return BpeTokenizer.train(CORPUS, vocab_size=400)


@pytest.mark.parametrize("text", SAMPLES)
def test_byte_round_trip(text):
    tok = ByteTokenizer()
    ids = tok.encode(text)
    assert ids == list(text.encode("utf-8"))
    assert tok.decode(ids) == text


@pytest.mark.parametrize("text", SAMPLES)
def test_bpe_round_trip(bpe, text):
    # Japanese and emoji never occur in the training corpus: byte-level BPE still covers them.
    ids = bpe.encode(text)
    assert all(0 <= i < bpe.vocab_size for i in ids)
    assert bpe.decode(ids) == text


def test_bpe_learns_merges(bpe):
    text = CORPUS[0]
    assert bpe.vocab_size == 400
    assert len(bpe.encode(text)) < len(text.encode("utf-8")) / 2


def test_bpe_vocabulary_stops_when_the_text_runs_out_of_pairs():
    tok = BpeTokenizer.train(["ab ab ab"], vocab_size=5000)
    assert BpeTokenizer.MIN_VOCAB <= tok.vocab_size < 5000


@pytest.mark.parametrize("make", [ByteTokenizer, lambda: BpeTokenizer.train(CORPUS, 300)])
def test_documents_end_with_eod_and_literal_marker_is_plain_text(make):
    tok = make()
    texts = ["first", f"says {EOD_TOKEN} inside", "é"]
    ids = tok.encode_documents(texts)
    assert ids.dtype == np.int64
    eod_positions = np.flatnonzero(ids == tok.eod_id)
    assert len(eod_positions) == 3  # one per document, none forged by the text
    assert eod_positions[-1] == len(ids) - 1
    assert tok.decode(ids) == "".join(t + EOD_TOKEN for t in texts)
    # The batched path agrees with encoding one text at a time.
    assert ids.tolist() == [i for t in texts for i in [*tok.encode(t), tok.eod_id]]


def test_byte_decode_of_ids_outside_the_data_vocabulary():
    tok = ByteTokenizer()
    assert tok.decode([104, 105, 300]) == "hi\ufffd"


@pytest.mark.parametrize("make", [ByteTokenizer, lambda: BpeTokenizer.train(CORPUS, 350)])
def test_save_and_load(tmp_path, make):
    tok = make()
    tok.save(tmp_path / "tokenizer")
    for where in (tmp_path, tmp_path / "tokenizer"):  # a DATA dir or its tokenizer dir
        loaded = load_tokenizer(where)
        assert type(loaded) is type(tok)
        assert (loaded.vocab_size, loaded.eod_id) == (tok.vocab_size, tok.eod_id)
        for text in [*SAMPLES, EOD_TOKEN]:
            assert loaded.encode(text) == tok.encode(text)


def test_load_without_tokenizer_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="fixedfirst prepare"):
        load_tokenizer(tmp_path)


def test_bpe_without_tokenizers_package_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import now raises ImportError
    with pytest.raises(UserError, match="pip install"):
        BpeTokenizer.train(CORPUS, 300)


def test_bpe_vocabulary_below_the_byte_alphabet_is_refused():
    with pytest.raises(UserError, match="at least 257"):
        BpeTokenizer.train(CORPUS, 256)
