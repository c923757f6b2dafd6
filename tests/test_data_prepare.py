"""`fixedfirst prepare` end to end through the command line, and every way it must refuse."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from fixedfirst.cli.main import main
from fixedfirst.data import prepare as prepare_module
from fixedfirst.data.shards import open_shard
from fixedfirst.data.tokenizer import EOD_TOKEN, load_tokenizer

FORTUNES = [f"Fortune {i}: a penny saved is {i} pennies earned.\n" for i in range(12)]
RECORDS = [f"Record {i} — naïve café über alles ✓" for i in range(10)]
ROWS = [f"Row {i}: parquet text with 日本語 {i}" for i in range(8)]
ROWS[3] = None  # a null row is skipped


def run_cli(capsys, *args) -> tuple[int, str, str]:
    """Run `fixedfirst ARGS` in process: (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err


def assert_one_line_error(code: int, err: str, *fragments: str) -> None:
    assert code == 2
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("fixedfirst prepare: error:")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def snapshot(directory: Path) -> dict[str, tuple[int, bytes]]:
    return {
        str(p.relative_to(directory)): (p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def corpus(tmp_path) -> dict:
    """A text file of %-separated fortunes, a JSONL file and a Parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path / "corpus"
    root.mkdir()
    txt = root / "fortunes.txt"
    txt.write_text("%\n".join(FORTUNES) + "%\n", encoding="utf-8")
    jsonl = root / "records.jsonl"
    lines = [json.dumps({"text": t, "id": i}, ensure_ascii=False) for i, t in enumerate(RECORDS)]
    lines.insert(4, "")  # blank lines are allowed
    jsonl.write_text("\n".join(lines) + "\n", encoding="utf-8")
    parquet = root / "rows.parquet"
    pq.write_table(pa.table({"text": ROWS, "n": list(range(len(ROWS)))}), parquet)
    documents = FORTUNES + RECORDS + [r for r in ROWS if r is not None]
    return {"files": [txt, jsonl, parquet], "documents": documents, "root": root}


def held_out(documents: list[str], fraction: float) -> list[bool]:
    """Which documents the rule of data/split.py holds out, written out from its docstring: a
    document is held out when the held-out bytes so far fall short of `fraction` of all bytes
    before it by more than half their mean document."""
    held, total, chosen = 0, 0, []
    for i, document in enumerate(documents):
        size = len(document.encode())
        hold = i > 0 and fraction * total - held > total / i / 2
        chosen.append(hold)
        held += size if hold else 0
        total += size
    return chosen


def documents_of(source) -> list[str]:
    """The documents of a DocumentInput, their pieces joined."""
    documents, parts = [], []
    for piece in source.pieces():
        parts.append(piece.text)
        if piece.last:
            documents.append("".join(parts))
            parts.clear()
    return documents


def split_documents(data: Path, split: str) -> list[str]:
    """The documents of a split, recovered from its shards with the saved tokenizer."""
    meta = json.loads((data / "meta.json").read_text())
    tokens = np.concatenate([open_shard(data / s["file"]) for s in meta["splits"][split]["shards"]])
    text = load_tokenizer(data).decode(tokens.tolist())
    assert text.endswith(EOD_TOKEN)
    return text.split(EOD_TOKEN)[:-1]


def test_prepare_txt_jsonl_parquet_byte(capsys, tmp_path, corpus):
    data = tmp_path / "data"
    code, out, err = run_cli(
        capsys, "prepare", *corpus["files"], "--separator", "%", "--val-fraction", "0.2",
        "--out", data, "--shard-tokens", "500",
    )  # fmt: skip
    assert code == 0, err
    assert "wrote" in out and err == ""
    documents = corpus["documents"]
    chosen = held_out(documents, 0.2)
    expected_val = [d for d, held in zip(documents, chosen, strict=True) if held]
    expected_train = [d for d, held in zip(documents, chosen, strict=True) if not held]
    val_bytes = sum(len(d.encode()) for d in expected_val)
    total = sum(len(d.encode()) for d in documents)
    assert abs(val_bytes - 0.2 * total) <= max(len(d.encode()) for d in documents)
    # Every document lands in exactly one split, whole and in order.
    assert split_documents(data, "train") == expected_train
    assert split_documents(data, "val") == expected_val

    meta = json.loads((data / "meta.json").read_text())
    assert meta["tokenizer"]["kind"] == "byte"
    assert meta["vocab_size"] == 257 and meta["dtype"] == "uint16"
    train = meta["splits"]["train"]
    assert train["documents"] == len(expected_train)
    assert train["bytes"] == sum(len(d.encode()) for d in expected_train)
    assert train["tokens"] == train["bytes"] + train["documents"]
    assert len(train["shards"]) == -(-train["tokens"] // 500)  # several shards of 500 tokens
    assert meta["tokens_per_byte"] == pytest.approx(1.0)
    assert [s["format"] for s in meta["sources"]] == ["text", "jsonl", "parquet"]
    assert len(meta["fingerprint"]) == 64
    assert not list(tmp_path.glob(".data.partial*"))  # no staging directory left behind


def test_prepare_bpe(capsys, tmp_path, corpus):
    data = tmp_path / "bpe"
    code, _, err = run_cli(
        capsys, "prepare", *corpus["files"], "--separator", "%", "--val-fraction", "0.2",
        "--out", data, "--tokenizer", "bpe", "--vocab-size", "300",
    )  # fmt: skip
    assert code == 0, err
    meta = json.loads((data / "meta.json").read_text())
    assert meta["tokenizer"]["kind"] == "bpe"
    assert 257 <= meta["vocab_size"] <= 300
    assert meta["tokens_per_byte"] < 1.0  # merges compress the text
    documents = corpus["documents"]
    chosen = held_out(documents, 0.2)
    assert split_documents(data, "val") == [
        d for d, held in zip(documents, chosen, strict=True) if held
    ]


def test_directory_input_recurses_and_skips_hidden_files_and_duplicate_links(
    capsys, tmp_path, corpus
):
    root = corpus["root"]
    (root / "sub").mkdir()
    (root / "sub" / "more.txt").write_text("one more document\n")
    (root / ".hidden").write_text("never read \xff")
    (root / "link.txt").symlink_to(root / "fortunes.txt")
    data = tmp_path / "data"
    code, _, err = run_cli(
        capsys, "prepare", root, "--separator", "%", "--val-fraction", "0.2", "--out", data
    )
    assert code == 0, err
    meta = json.loads((data / "meta.json").read_text())
    names = [Path(s["input"]).name for s in meta["sources"]]
    assert names == ["fortunes.txt", "records.jsonl", "rows.parquet", "more.txt"]
    total = sum(s["documents"] for s in meta["splits"].values())
    assert total == len(corpus["documents"]) + 1


def test_blank_line_separator_and_whole_file_documents(tmp_path):
    path = tmp_path / "paragraphs.txt"
    path.write_text("first paragraph\nstill first\n\nsecond\n\n\n\nthird\n")
    from fixedfirst.data.documents import TextFile

    assert documents_of(TextFile(path, "")) == [
        "first paragraph\nstill first\n",
        "second\n",
        "third\n",
    ]
    assert documents_of(TextFile(path, None)) == [path.read_text()]


def test_identical_rerun_is_a_no_op(capsys, tmp_path, corpus):
    data = tmp_path / "data"
    args = ["prepare", *corpus["files"], "--separator", "%", "--val-fraction", "0.2"]
    assert run_cli(capsys, *args, "--out", data)[0] == 0
    before = snapshot(data)
    code, out, _ = run_cli(capsys, *args, "--out", data)
    assert code == 0
    assert "nothing to do" in out
    assert snapshot(data) == before


# ---------------------------------------------------------------- refusals: one line, no damage


@pytest.fixture
def prepared(capsys, tmp_path, corpus) -> Path:
    data = tmp_path / "data"
    args = ["prepare", *corpus["files"], "--separator", "%", "--val-fraction", "0.2"]
    assert run_cli(capsys, *args, "--out", data)[0] == 0
    return data


def test_out_holding_different_data_is_not_overwritten(capsys, prepared, corpus):
    before = snapshot(prepared)
    code, _, err = run_cli(
        capsys, "prepare", *corpus["files"], "--separator", "%", "--val-fraction", "0.3",
        "--out", prepared,
    )  # fmt: skip
    assert_one_line_error(code, err, str(prepared), "already holds", "nothing overwritten")
    assert snapshot(prepared) == before


def test_out_with_changed_input_content_is_not_overwritten(capsys, prepared, corpus):
    before = snapshot(prepared)
    corpus["files"][0].write_text("%\n".join(FORTUNES[:5]) + "%\n")
    code, _, err = run_cli(
        capsys, "prepare", *corpus["files"], "--separator", "%", "--val-fraction", "0.2",
        "--out", prepared,
    )  # fmt: skip
    assert_one_line_error(code, err, "already holds")
    assert snapshot(prepared) == before


def test_out_that_is_a_foreign_non_empty_directory_is_not_touched(capsys, tmp_path, corpus):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    before = snapshot(out)
    code, _, err = run_cli(capsys, "prepare", corpus["files"][1], "--out", out)
    assert_one_line_error(code, err, str(out), "nothing overwritten")
    assert snapshot(out) == before


def test_empty_out_directory_is_used(capsys, tmp_path, corpus):
    out = tmp_path / "empty"
    out.mkdir()
    code, _, err = run_cli(
        capsys, "prepare", corpus["files"][1], "--val-fraction", "0.2", "--out", out
    )
    assert code == 0, err
    assert (out / "meta.json").is_file()


def assert_nothing_written(tmp_path: Path, out: Path) -> None:
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if ".partial" in p.name]


@pytest.mark.parametrize(
    "content", ["", "   \n\n", "%\n%\n  \n%\n"], ids=["empty", "whitespace", "separators"]
)
def test_empty_input(capsys, tmp_path, content):
    path = tmp_path / "empty.txt"
    path.write_text(content)
    out = tmp_path / "data"
    code, _, err = run_cli(capsys, "prepare", path, "--separator", "%", "--out", out)
    assert_one_line_error(code, err, "empty input", str(path))
    assert_nothing_written(tmp_path, out)


def test_empty_directory(capsys, tmp_path):
    (tmp_path / "nothing").mkdir()
    out = tmp_path / "data"
    code, _, err = run_cli(capsys, "prepare", tmp_path / "nothing", "--out", out)
    assert_one_line_error(code, err, "empty input")
    assert_nothing_written(tmp_path, out)


def test_undecodable_file(capsys, tmp_path, corpus):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("line one\ncaf\xe9 in Latin-1\n".encode("latin-1"))
    out = tmp_path / "data"
    code, _, err = run_cli(capsys, "prepare", corpus["files"][0], bad, "--out", out)
    assert_one_line_error(code, err, str(bad), "not UTF-8", "0xe9", "line 2", "offset 12")
    assert_nothing_written(tmp_path, out)


def test_binary_file(capsys, tmp_path):
    bad = tmp_path / "index.dat"
    bad.write_bytes(b"\x00\x00\x00\x02 looks like ascii")
    out = tmp_path / "data"
    code, _, err = run_cli(capsys, "prepare", bad, "--out", out)
    assert_one_line_error(code, err, str(bad), "binary")
    assert_nothing_written(tmp_path, out)


def test_vocabulary_larger_than_the_shard_dtype(capsys, tmp_path, corpus):
    out = tmp_path / "data"
    code, _, err = run_cli(
        capsys, "prepare", *corpus["files"], "--out", out,
        "--tokenizer", "bpe", "--vocab-size", "70000", "--dtype", "uint16",
    )  # fmt: skip
    assert_one_line_error(code, err, "70000", "uint16")
    assert_nothing_written(tmp_path, out)


def test_nonexistent_input(capsys, tmp_path, corpus):
    out = tmp_path / "data"
    missing = tmp_path / "no-such-file.txt"
    code, _, err = run_cli(capsys, "prepare", corpus["files"][0], missing, "--out", out)
    assert_one_line_error(code, err, str(missing), "no such file")
    assert_nothing_written(tmp_path, out)


@pytest.mark.parametrize(
    ("line", "fragment"),
    [("{not json", "not a JSON line"), ('{"body": "x"}', "no 'text' field"), ("[1]", "no 'text'")],
)
def test_bad_jsonl(capsys, tmp_path, line, fragment):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "fine"}\n' + line + "\n")
    out = tmp_path / "data"
    code, _, err = run_cli(capsys, "prepare", path, "--out", out)
    assert_one_line_error(code, err, f"{path}:2", fragment)
    assert_nothing_written(tmp_path, out)


def test_parquet_without_text_column(capsys, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"body": ["a", "b"]}), path)
    code, _, err = run_cli(capsys, "prepare", path, "--out", tmp_path / "data")
    assert_one_line_error(code, err, str(path), "no 'text' column", "--text-field")


def test_text_field_option(capsys, tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"body": f"doc {i}"}) + "\n" for i in range(20)))
    code, _, err = run_cli(
        capsys, "prepare", path, "--text-field", "body", "--val-fraction", "0.1",
        "--out", tmp_path / "data",
    )  # fmt: skip
    assert code == 0, err


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        (["--tokenizer", "bpe"], "needs --vocab-size"),
        (["--vocab-size", "512"], "bpe only"),
        (["--tokenizer", "bpe", "--vocab-size", "100"], "at least 257"),
        (["--val-fraction", "0"], "--val-fraction"),
        (["--val-fraction", "1.5"], "--val-fraction"),
        (["--shard-tokens", "0"], "--shard-tokens"),
        (["--shard-tokens", "99"], "--shard-tokens must be >= 100"),
    ],
)
def test_bad_options(capsys, tmp_path, corpus, options, fragment):
    out = tmp_path / "data"
    code, _, err = run_cli(
        capsys, "prepare", *corpus["files"], "--separator", "%", "--out", out, *options
    )
    assert_one_line_error(code, err, fragment)
    assert_nothing_written(tmp_path, out)


def test_hf_input_without_datasets_names_the_pip_command(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import now raises ImportError
    code, _, err = run_cli(capsys, "prepare", "hf:some/corpus", "--out", tmp_path / "data")
    assert_one_line_error(code, err, "hf:some/corpus", "pip install datasets")


def test_hf_input_without_network(capsys, monkeypatch, tmp_path):
    calls = []

    def load_dataset(name, config, split):
        calls.append((name, config, split))
        raise ConnectionError("Couldn't reach 'some/corpus' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    code, _, err = run_cli(capsys, "prepare", "hf:some/corpus:en", "--out", tmp_path / "data")
    assert_one_line_error(code, err, "hf:some/corpus:en", "needs the network")
    assert calls == [("some/corpus", "en", "train")]


def test_hf_input_reads_the_text_column(capsys, monkeypatch, tmp_path):
    """The hub path with a stand-in for `datasets` (no network here)."""
    texts = [f"hub document {i}" for i in range(10)]

    class FakeDataset:
        column_names = ("text", "url")
        _fingerprint = "abc123"

        def iter(self, batch_size):
            for i in range(0, len(texts), batch_size):
                yield {"text": texts[i : i + batch_size], "url": ["u"] * batch_size}

    fake = types.SimpleNamespace(load_dataset=lambda name, config, split: FakeDataset())
    monkeypatch.setitem(sys.modules, "datasets", fake)
    data = tmp_path / "data"
    code, _, err = run_cli(
        capsys, "prepare", "hf:some/corpus", "--val-fraction", "0.2", "--out", data
    )
    assert code == 0, err
    assert split_documents(data, "train") + split_documents(data, "val") != []
    assert sorted(split_documents(data, "train") + split_documents(data, "val")) == sorted(texts)


def test_parquet_without_pyarrow_names_the_pip_command(capsys, monkeypatch, tmp_path, corpus):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    code, _, err = run_cli(capsys, "prepare", corpus["files"][2], "--out", tmp_path / "data")
    assert_one_line_error(code, err, "pip install", "pyarrow")


def test_crash_midway_leaves_no_dataset(capsys, monkeypatch, tmp_path, corpus):
    """A failure after some shards were written leaves neither DATA nor a temporary directory."""
    real_flush = prepare_module.ShardWriter._flush
    flushed = []

    def flush_then_crash(self):
        real_flush(self)
        flushed.append(self.shards[-1]["file"])
        if len(flushed) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(prepare_module.ShardWriter, "_flush", flush_then_crash)
    out = tmp_path / "data"
    code, _, err = run_cli(
        capsys, "prepare", *corpus["files"], "--separator", "%", "--val-fraction", "0.2",
        "--shard-tokens", "200", "--out", out,
    )  # fmt: skip
    assert code == 130 and "interrupted" in err
    assert len(flushed) == 2
    assert_nothing_written(tmp_path, out)


def test_bpe_learns_from_the_training_split_only(capsys, tmp_path):
    """Validation text must not shape the tokenizer: its frequent pairs are never merged."""
    ordinary = [f"ordinary training sentence {i:02d}\n" for i in range(40)]
    chosen = held_out(ordinary, 0.25)
    documents = [
        "zqxw " * 5 + "zqxw\n" if held else d for d, held in zip(ordinary, chosen, strict=True)
    ]
    assert held_out(documents, 0.25) == chosen  # the same sizes, so the same documents held
    path = tmp_path / "docs.txt"
    path.write_text("%\n".join(documents) + "%\n")
    data = tmp_path / "data"
    code, _, err = run_cli(
        capsys, "prepare", path, "--separator", "%", "--val-fraction", "0.25",
        "--tokenizer", "bpe", "--vocab-size", "400", "--out", data,
    )  # fmt: skip
    assert code == 0, err
    assert split_documents(data, "val")[0].startswith("zqxw")
    assert len(load_tokenizer(data).encode("zqxw")) == 4  # no merge among these letters


def test_too_few_documents_hold_out_the_end_of_each_and_say_so(capsys, tmp_path):
    """Two files, one document each: 1% of the documents is none, so the last 1% of each
    document's text is held out instead (and the validation text is not trained on)."""
    words = ["river", "stone", "lamp", "orbit", "cedar"]
    for i in range(2):
        (tmp_path / f"doc{i}.txt").write_text(" ".join(words[(i + j) % 5] for j in range(4000)))
    out = tmp_path / "data"
    code, stdout, err = run_cli(
        capsys, "prepare", tmp_path / "doc0.txt", tmp_path / "doc1.txt", "--out", out
    )
    assert code == 0, err
    meta = json.loads((out / "meta.json").read_text())
    assert meta["split"] == "bytes"
    assert meta["options"]["val_fraction"] == pytest.approx(0.1)  # auto: 16 KB of 48 KB, <= 10%
    assert meta["splits"]["val"]["documents"] == 2 and meta["splits"]["train"]["documents"] == 2
    total = sum(meta["splits"][s]["bytes"] for s in ("train", "val"))
    assert 0.09 < meta["splits"]["val"]["bytes"] / total < 0.11
    assert "the last 10% of each document's text (too few documents" in stdout


def test_huge_shard_count_is_refused_before_any_work(capsys, tmp_path):
    big = tmp_path / "big.txt"
    big.write_text("stone " * 200_000)  # 1.2 MB: 12,000 shards of 100 tokens, over 10,000
    out = tmp_path / "data"
    code, _, err = run_cli(capsys, "prepare", big, "--out", out, "--shard-tokens", "100")
    assert_one_line_error(code, err, "would write about 12,000 shard files")
    assert_nothing_written(tmp_path, out)
