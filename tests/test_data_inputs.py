"""What `prepare` reads from a command line and says about it (issue 57): links to directories
followed and said, dangling links refused, hidden files and prepared data skipped with their
names, pipes read once, a byte-order mark never a token, a file that is not UTF-8 text named for
what it is, SIGTERM and a second prepare into one --out. The refusals' exact lines are in the
bad-input table (tests/bad_input_corpus.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from fixedfirst.cli.main import main
from fixedfirst.data.shards import open_shard
from fixedfirst.data.tokenizer import EOD_TOKEN, load_tokenizer

ROOT = Path(__file__).resolve().parents[1]


def run_cli(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err


def documents_in(data: Path) -> list[str]:
    """Every document of both splits, decoded with the saved tokenizer, sorted."""
    meta = json.loads((data / "meta.json").read_text())
    tokenizer = load_tokenizer(data)
    found = []
    for entry in meta["splits"].values():
        tokens = np.concatenate([open_shard(data / s["file"]) for s in entry["shards"]])
        found += tokenizer.decode(tokens.tolist()).split(EOD_TOKEN)[:-1]
    return sorted(found)


def text_in(data: Path) -> str:
    """The text of a one-document corpus: its training part, then its held-out end."""
    meta = json.loads((data / "meta.json").read_text())
    tokenizer = load_tokenizer(data)
    parts = []
    for split in ("train", "val"):
        files = meta["splits"][split]["shards"]
        tokens = np.concatenate([open_shard(data / s["file"]) for s in files])
        parts.append(tokenizer.decode(tokens.tolist()).removesuffix(EOD_TOKEN))
    return "".join(parts)


def write_documents(directory: Path, prefix: str, count: int) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    texts = [f"{prefix} document {i}: " + "words of its own " * 40 + "\n" for i in range(count)]
    for i, text in enumerate(texts):
        (directory / f"{prefix}-{i}.txt").write_text(text)
    return texts


def test_a_linked_directory_is_read_and_said(capsys, tmp_path):
    """It was skipped without a word ("inputs: 1" of 10 files)."""
    corpus = tmp_path / "corpus"
    texts = write_documents(corpus, "here", 1)
    texts += write_documents(tmp_path / "elsewhere", "there", 9)
    (corpus / "more").symlink_to(tmp_path / "elsewhere")
    (corpus / "loop").symlink_to(corpus)  # back to a directory already read: not again
    code, out, err = run_cli(capsys, "prepare", corpus, "--out", tmp_path / "data")
    assert code == 0, err
    assert documents_in(tmp_path / "data") == sorted(texts)
    assert "inputs: 10 " in out
    assert f"note: {corpus}: followed 1 link(s) to directories: {corpus}/more -> " in out
    assert f"did not follow 1 link(s) to a directory already read: {corpus}/loop" in out


def test_a_dangling_link_is_refused(capsys, tmp_path):
    corpus = tmp_path / "corpus"
    write_documents(corpus, "here", 3)
    (corpus / "gone.txt").symlink_to(tmp_path / "deleted.txt")
    code, _, err = run_cli(capsys, "prepare", corpus, "--out", tmp_path / "data")
    assert code == 2
    assert err.count("\n") == 1
    assert f"{corpus}/gone.txt: a link to {tmp_path}/deleted.txt, which does not exist" in err
    assert not (tmp_path / "data").exists()


def test_hidden_files_and_prepared_data_are_skipped_by_name(capsys, tmp_path):
    corpus = tmp_path / "corpus"
    texts = write_documents(corpus, "text", 6)
    (corpus / ".git").mkdir()
    (corpus / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (corpus / ".notes.txt").write_text("a hidden note\n")
    code, _, err = run_cli(capsys, "prepare", corpus / "text-0.txt", "--out", corpus / "../old")
    assert code == 0, err
    shutil.move(tmp_path / "old", corpus / "old-data")  # prepared data moved into the corpus
    code, out, err = run_cli(
        capsys, "prepare", corpus, "--out", tmp_path / "data", "--val-fraction", "0.3"
    )
    assert code == 0, err
    assert documents_in(tmp_path / "data") == sorted(texts)
    assert (
        f"note: {corpus}: skipped 2 hidden file(s) and directories: {corpus}/.git, "
        f"{corpus}/.notes.txt (name a hidden file as an INPUT to read it)"
    ) in out
    assert f"skipped 1 directory(ies) of prepared data, not text: {corpus}/old-data" in out


def test_an_out_inside_the_input_directory_is_refused(capsys, tmp_path):
    corpus = tmp_path / "corpus"
    write_documents(corpus, "text", 3)
    code, _, err = run_cli(capsys, "prepare", corpus, "--out", corpus / "data")
    assert code == 2
    assert "is inside the input directory" in err and "choose an --out outside" in err
    assert sorted(p.name for p in corpus.iterdir()) == [f"text-{i}.txt" for i in range(3)]


def jsonl(records: list[str]) -> str:
    return "".join(json.dumps({"text": r}) + "\n" for r in records)


RECORDS = [f"record {i}: " + "a line of text " * 20 for i in range(30)]


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "fixedfirst", *args]


def test_process_substitution_is_read_once(tmp_path):
    """`prepare <(cat corpus.jsonl)`: said "empty input" (the pipe was read twice); now its
    JSON lines are told by its first line."""
    (tmp_path / "corpus.jsonl").write_text(jsonl(RECORDS))
    line = " ".join(command("prepare", "<(cat corpus.jsonl)", "--out", "data"))
    done = subprocess.run(
        ["bash", "-c", line], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert documents_in(tmp_path / "data") == sorted(RECORDS)
    assert "not a regular file, read once (jsonl)" in done.stdout
    assert not list(tmp_path.glob(".data.partial*"))


def test_a_named_pipe_is_read_once(tmp_path):
    """It hung forever, waiting for a second writer."""
    fifo = tmp_path / "corpus.fifo"
    os.mkfifo(fifo)
    text = "plain text through a pipe, " * 200 + "\n"

    def write() -> None:
        with open(fifo, "w") as f:
            f.write(text)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    done = subprocess.run(
        command("prepare", str(fifo), "--out", str(tmp_path / "data")),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert text_in(tmp_path / "data") == text
    assert "read once (text)" in done.stdout


def test_a_byte_order_mark_is_not_text(capsys, tmp_path):
    (tmp_path / "bom.txt").write_bytes(b"\xef\xbb\xbf" + ("caf\xe9 au lait " * 300).encode())
    (tmp_path / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + jsonl(RECORDS).encode())
    for name in ("bom.txt", "bom.jsonl"):
        code, _, err = run_cli(capsys, "prepare", tmp_path / name, "--out", tmp_path / name[4:])
        assert code == 0, err
    text = text_in(tmp_path / "txt")
    assert text == "café au lait " * 300 and "\ufeff" not in text
    assert documents_in(tmp_path / "jsonl") == sorted(RECORDS)


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("one line\n".encode("utf-16"), "UTF-16 text (it begins with the byte-order mark FF FE)"),
        ("a line of text\n".encode("utf-16-le"), "UTF-16LE text (without a byte-order mark"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "a PNG image, not text; leave it out"),
        (b"\x1f\x8b\x08\x00\x00\x00", "a gzip-compressed file, not text; decompress it first"),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF", "a JPEG image, not text"),
    ],
    ids=["utf16-bom", "utf16-no-bom", "png", "gzip", "jpeg"],
)
def test_a_file_that_is_not_utf8_text_is_named_for_what_it_is(capsys, tmp_path, content, said):
    (tmp_path / "file.txt").write_bytes(content)
    code, _, err = run_cli(capsys, "prepare", tmp_path / "file.txt", "--out", tmp_path / "data")
    assert code == 2 and err.count("\n") == 1
    assert said in err
    assert "binary" not in err


@pytest.mark.parametrize(
    "content",
    [json.dumps([{"text": r} for r in RECORDS], indent=2), json.dumps([{"text": "one"}])],
    ids=["several-lines", "one-line"],
)
def test_a_json_array_is_not_called_a_bad_json_line(capsys, tmp_path, content):
    (tmp_path / "corpus.json").write_text(content + "\n")
    code, _, err = run_cli(capsys, "prepare", tmp_path / "corpus.json", "--out", tmp_path / "d")
    assert code == 2
    assert "one JSON document (an array) over several lines, not JSON lines" in err
    assert "jq -c '.[]'" in err


def test_separator_for_json_lines_only_is_refused(capsys, tmp_path):
    (tmp_path / "corpus.jsonl").write_text(jsonl(RECORDS))
    code, _, err = run_cli(
        capsys, "prepare", tmp_path / "corpus.jsonl", "--separator", "%", "--out", tmp_path / "d"
    )
    assert code == 2
    assert "--separator '%' applies to plain text files, and every input is jsonl" in err
    assert not (tmp_path / "d").exists() and not list(tmp_path.glob(".d.partial*"))


HOLDER = """
import fcntl, os, sys, time
os.makedirs(sys.argv[1], exist_ok=True)
fd = os.open(os.path.join(sys.argv[1], ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, b"4242 prepare corpus/ --out data\\n")
open(os.path.join(sys.argv[1], "train-00000.bin"), "w").write("half written")
print("held", flush=True)
time.sleep(120)
"""


def test_a_second_prepare_into_one_out_is_refused_at_once(capsys, tmp_path):
    """It ran to the end and then failed with "Directory not empty"; and once the first is
    gone (killed, its lock dropped by the kernel), what it left is cleared and used."""
    texts = write_documents(tmp_path / "corpus", "text", 5)
    staging = tmp_path / ".data.partial"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(staging)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        code, _, err = run_cli(capsys, "prepare", tmp_path / "corpus", "--out", tmp_path / "data")
        assert code == 2
        assert "another prepare is writing it now (PID 4242, `prepare corpus/ --out data`)" in err
        assert (staging / "train-00000.bin").read_text() == "half written"
    finally:
        holder.kill()
        holder.wait()
    code, _, err = run_cli(
        capsys, "prepare", tmp_path / "corpus", "--out", tmp_path / "data", "--val-fraction", "0.3"
    )
    assert code == 0, err
    assert documents_in(tmp_path / "data") == sorted(texts)
    assert not staging.exists() and not (tmp_path / "data" / ".lock").exists()


def test_sigterm_stops_prepare_with_a_line_and_leaves_nothing(tmp_path):
    """It died with status 143, no word, and a hidden partial directory left behind."""
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(3000)]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(" ".join(rng.choice(words, 600_000)) + "\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    child = subprocess.Popen(
        command("prepare", str(corpus), "--out", str(tmp_path / "data"), "--tokenizer", "bpe",
                "--vocab-size", "4000"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".data.partial*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # well into the work
    child.send_signal(signal.SIGTERM)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 143, (out, err)
    assert err.splitlines() == [
        f"fixedfirst prepare: stopped by SIGTERM: nothing written to --out {tmp_path / 'data'}; "
        "run the command again"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt"]
