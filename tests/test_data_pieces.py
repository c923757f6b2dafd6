"""`prepare` hands the tokenizer bounded text, whatever the size of a file (issue 57, point 1):
pieces cut where BPE cuts anyway give the whole document's words and tokens, no call sees more
than --batch-mb of text, and what is written does not depend on --batch-mb."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fixedfirst.data import tokenizer as tokenizer_module
from fixedfirst.data.pieces import PIECE_CHARS, pieces
from fixedfirst.data.prepare import PrepareOptions, prepare
from fixedfirst.data.shards import open_shard
from fixedfirst.data.tokenizer import BpeTokenizer, load_tokenizer

WORDS = ["river", "stone's", "lamp,", "orbit", "cedar.", "quartz", "naïve", "日本語", "42", "--"]


def varied_text(nbytes: int, seed: int = 0) -> str:
    """Words, punctuation, numbers and non-ASCII text, with single and double spaces and line
    breaks, indented lines and CRLF: every kind of boundary the cut rule must get right."""
    rng = np.random.default_rng(seed)
    gaps = [" ", " ", " ", "  ", "\n", "\n\n", "\n    ", "\r\n", "\t"]
    out, size = [], 0
    while size < nbytes:
        word = WORDS[rng.integers(len(WORDS))] + gaps[rng.integers(len(gaps))]
        out.append(word)
        size += len(word)
    return "".join(out)


def test_pieces_are_bounded_and_rejoin_to_the_text():
    text = varied_text(300_000)
    blocks = [text[i : i + 7_000] for i in range(0, len(text), 7_000)]
    cut = list(pieces(blocks, limit=4096))
    assert "".join(p.text for p in cut) == text
    assert max(len(p.text) for p in cut) <= 4096
    assert [p.last for p in cut] == [False] * (len(cut) - 1) + [True]
    assert len(cut) > 70


def test_a_text_without_a_safe_place_is_cut_at_the_limit():
    cut = list(pieces(["x" * 10_000], limit=4096))
    assert [len(p.text) for p in cut] == [4096, 4096, 1808]


def test_a_blank_document_gives_no_pieces():
    assert list(pieces([" \n", "\t" * 9_000, "\n"], limit=4096)) == []


@pytest.fixture(scope="module")
def trained() -> BpeTokenizer:
    return BpeTokenizer.train([varied_text(200_000, seed=1)], 600)


def test_bpe_learns_and_encodes_the_same_from_pieces(trained):
    """Against the tokenizer itself, fed the whole text at once: the same merges, the same
    tokens (the pieces' boundaries are where its pre-tokenizer splits anyway)."""
    text = varied_text(200_000, seed=1)
    cut = [p.text for p in pieces([text], limit=2048)]
    assert len(cut) > 90
    assert BpeTokenizer.train(cut, 600).hf.to_str() == trained.hf.to_str()
    assert [i for piece in cut for i in trained.encode(piece)] == trained.encode(text)


class Calls:
    """The longest text and the most text of one tokenizer call, learning and encoding."""

    def __init__(self) -> None:
        self.longest = 0
        self.per_call = 0


@pytest.fixture
def watched(monkeypatch) -> Calls:
    calls = Calls()
    encode_batch = BpeTokenizer.encode_batch
    train = BpeTokenizer.train.__func__

    def watched_encode(self, texts):
        calls.longest = max([calls.longest, *map(len, texts)])
        calls.per_call = max(calls.per_call, sum(map(len, texts)))
        return encode_batch(self, texts)

    def watched_train(cls, texts, vocab_size):
        def seen():
            for text in texts:
                calls.longest = max(calls.longest, len(text))
                yield text

        return train(cls, seen(), vocab_size)

    monkeypatch.setattr(BpeTokenizer, "encode_batch", watched_encode)
    monkeypatch.setattr(BpeTokenizer, "train", classmethod(watched_train))
    return calls


def tokens_of(data: Path) -> dict[str, list[int]]:
    meta = json.loads((data / "meta.json").read_text())
    return {
        split: np.concatenate([open_shard(data / s["file"]) for s in entry["shards"]]).tolist()
        for split, entry in meta["splits"].items()
    }


def test_one_large_file_reaches_the_tokenizer_in_bounded_calls(tmp_path, watched):
    """One 600 KB file, one document: no call of the tokenizer sees more than a piece per
    text or --batch-mb (here 128 KB) per call, and the tokens are the whole text's."""
    text = varied_text(600_000, seed=2)
    (tmp_path / "corpus.txt").write_text(text)
    options = PrepareOptions(tokenizer="bpe", vocab_size=500, val_fraction=0.1)
    prepare([str(tmp_path / "corpus.txt")], tmp_path / "data", options, batch_bytes=128 << 10)
    assert 0 < watched.longest <= PIECE_CHARS
    assert watched.per_call <= (128 << 10) + PIECE_CHARS
    tokenizer = load_tokenizer(tmp_path / "data")
    tokens = tokens_of(tmp_path / "data")
    train_text, val_text = (tokenizer.decode(tokens[s][:-1]) for s in ("train", "val"))
    assert train_text + val_text == text  # one document: its end held out
    assert tokens["train"][:-1] == tokenizer.encode(train_text)


def test_what_is_written_does_not_depend_on_the_batch(tmp_path):
    text = varied_text(300_000, seed=3)
    (tmp_path / "corpus.txt").write_text(text)
    options = PrepareOptions(tokenizer="bpe", vocab_size=400, val_fraction=0.05)
    written = []
    for batch in (16 << 10, 4 << 20):
        out = tmp_path / f"data-{batch}"
        prepare([str(tmp_path / "corpus.txt")], out, options, batch_bytes=batch)
        written.append(
            (tokens_of(out), (out / "tokenizer" / tokenizer_module.BPE_FILE).read_text())
        )
    assert written[0] == written[1]
