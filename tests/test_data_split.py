"""The validation split holds out what --val-fraction says, in bytes (= byte tokens), in whole
documents, to within one document (issue 57: a fraction of the documents held out 22% of the
text for --val-fraction 0.05); data prepared before keep their split."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from fixedfirst.cli.main import main
from fixedfirst.data.pieces import Piece
from fixedfirst.data.shards import open_shard
from fixedfirst.data.split import Split
from fixedfirst.data.tokenizer import EOD_TOKEN, load_tokenizer
from fixedfirst.data.tokens import TokenSource

FIXTURE = Path(__file__).parent / "fixtures" / "prepared-v1"
"""Data prepared by fixedfirst at 108cc15 (format 1, a fraction of the documents held out):
`fixedfirst prepare corpus.txt --separator % --val-fraction 0.2 --out data` in this folder."""


def run_cli(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err


def document_sizes(count: int, seed: int, spread: float = 1.5) -> list[int]:
    """Lognormal sizes: most documents short, a few many times the median."""
    rng = np.random.default_rng(seed)
    return [int(s) + 1 for s in rng.lognormal(7, spread, count)]


def held_by_split(sizes: list[int], fraction: float) -> list[bool]:
    """Which documents of these sizes `Split` holds out (one piece per document)."""
    stream = [Piece("x" * size, True) for size in sizes]
    return [part == "val" for part, _ in Split(fraction)(stream)]


@pytest.mark.parametrize("fraction", [0.01, 0.05, 0.2, 0.5])
@pytest.mark.parametrize("seed", range(6))
def test_held_out_bytes_stay_within_one_document_of_the_fraction(fraction, seed):
    """After every document, not only at the end: the held-out bytes differ from fraction x
    the bytes so far by less than the largest document so far."""
    sizes = document_sizes(400, seed)
    held = held_by_split(sizes, fraction)
    total = kept = largest = 0
    for size, is_held in zip(sizes, held, strict=True):
        total += size
        kept += size if is_held else 0
        largest = max(largest, size)
        assert abs(kept - fraction * total) < largest
    assert any(held) and not all(held)


def test_whether_a_document_is_held_does_not_depend_on_its_own_size():
    """A rule that held out whichever document brought the share nearest the fraction would
    seldom pick a long one: here each document's decision is the same at 1x and 50x its size."""
    sizes = document_sizes(200, seed=7)
    held = held_by_split(sizes, 0.1)
    for index in (10, 57, 123, 199):
        changed = [*sizes[:index], sizes[index] * 50, *sizes[index + 1 :]]
        assert held_by_split(changed, 0.1)[index] == held[index]
        assert held_by_split(changed, 0.1)[:index] == held[:index]


def uneven_corpus(path: Path) -> list[str]:
    """100 documents: 95 of 100 bytes and, where a fraction of 5% of the documents falls
    (documents 9, 29, 49, 69, 89), five of 20 KB: what held out 22% of a real corpus."""
    rng = np.random.default_rng(57)
    words = ["river", "stone", "lamp", "orbit", "cedar", "quartz", "violet", "harbor"]

    def document(nbytes: int) -> str:
        text = ""
        while len(text) < nbytes:
            text += words[rng.integers(len(words))] + " "
        return text[:nbytes].strip() + "\n"

    documents = [document(20_000 if i % 20 == 9 else 100) for i in range(100)]
    path.write_text("%\n".join(documents) + "%\n")
    return documents


def split_tokens(data: Path) -> dict[str, np.ndarray]:
    meta = json.loads((data / "meta.json").read_text())
    return {
        split: np.concatenate([open_shard(data / s["file"]) for s in entry["shards"]])
        for split, entry in meta["splits"].items()
    }


def test_val_fraction_means_tokens_on_documents_of_uneven_size(capsys, tmp_path):
    documents = uneven_corpus(tmp_path / "corpus.txt")
    code, out, err = run_cli(
        capsys, "prepare", tmp_path / "corpus.txt", "--separator", "%",
        "--val-fraction", "0.05", "--out", tmp_path / "data",
    )  # fmt: skip
    assert code == 0, err
    tokens = split_tokens(tmp_path / "data")
    val, total = len(tokens["val"]), len(tokens["val"]) + len(tokens["train"])
    largest = max(len(d.encode()) + 1 for d in documents)  # with its end-of-document token
    assert abs(val - 0.05 * total) < largest
    assert val / total == pytest.approx(0.05, abs=0.02)
    # Whole documents, each in one split, in order.
    text = load_tokenizer(tmp_path / "data").decode(tokens["val"].tolist())
    held = text.split(EOD_TOKEN)[:-1]
    assert held and all(d in documents for d in held)
    assert f"validation: {val / total:.2%}" not in out  # the line counts bytes, then tokens
    meta = json.loads((tmp_path / "data" / "meta.json").read_text())
    text_share = meta["splits"]["val"]["bytes"] / sum(s["bytes"] for s in meta["splits"].values())
    assert f"validation: {text_share:.2%} of the text" in out
    assert f"(5.00% asked; {val / total:.2%} of the tokens)" in out


def test_every_input_contributes_documents(capsys, tmp_path):
    rng = np.random.default_rng(3)
    for index in range(5):
        documents = [" ".join(["word"] * int(rng.integers(20, 200))) + "\n" for _ in range(40)]
        (tmp_path / f"part{index}.txt").write_text("%\n".join(documents) + "%\n")
    code, _, err = run_cli(
        capsys, "prepare", *sorted(tmp_path.glob("part*.txt")), "--separator", "%",
        "--val-fraction", "0.1", "--out", tmp_path / "data",
    )  # fmt: skip
    assert code == 0, err
    sizes = []
    for index in range(5):
        text = (tmp_path / f"part{index}.txt").read_text()
        sizes += [(index, len(d.encode())) for d in text.split("%\n") if d.strip()]
    held = held_by_split([size for _, size in sizes], 0.1)
    assert {index for (index, _), is_held in zip(sizes, held, strict=True) if is_held} == set(
        range(5)
    )
    meta = json.loads((tmp_path / "data" / "meta.json").read_text())
    assert meta["splits"]["val"]["documents"] == sum(held)


def test_data_prepared_before_keep_their_split(capsys, tmp_path):
    """Format 1 data load as they are, and `prepare` with the same inputs and options keeps
    them (its own split would hold out other documents) and says why."""
    work = tmp_path / "work"
    shutil.copytree(FIXTURE, work)
    meta_before = (work / "data" / "meta.json").read_text()
    assert json.loads(meta_before)["format_version"] == 1
    source = TokenSource(work / "data", seq_len=16)
    assert len(source.val) > 0 and source.vocab_size == 257
    # The documents format 1 held out: document i when round((i + 1) f) > round(i f).
    documents = [d for d in (work / "corpus.txt").read_text().split("%\n") if d.strip()]
    old_rule = [d for i, d in enumerate(documents) if int((i + 1) * 0.2 + 0.5) > int(i * 0.2 + 0.5)]
    tokens = split_tokens(work / "data")
    val = load_tokenizer(work / "data").decode(tokens["val"].tolist()).split(EOD_TOKEN)[:-1]
    assert val == old_rule
    new_rule = held_by_split([len(d.encode()) for d in documents], 0.2)
    assert [
        d for d, h in zip(documents, new_rule, strict=True) if h
    ] != old_rule  # so keeping matters

    before = {p: p.read_bytes() for p in (work / "data").rglob("*") if p.is_file()}
    code, out, err = run_cli(
        capsys, "prepare", work / "corpus.txt", "--separator", "%", "--val-fraction", "0.2",
        "--out", work / "data",
    )  # fmt: skip
    assert code == 0, err
    assert "already holds this data" in out
    assert "note: kept as prepared by an earlier fixedfirst (format 1" in out
    assert {p: p.read_bytes() for p in (work / "data").rglob("*") if p.is_file()} == before
