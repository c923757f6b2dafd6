"""What a newcomer hit preparing a corpus nobody here wrote (issue 57), as bad-input cases.

`CORPUS_CASES` are refusals (part of the bad-input table: `all_cases` in tests/
bad_input_cases.py); `CORPUS_NOTICES` are commands that do what was asked and must say what
they did (the second table: `all_notices` in tests/bad_input_newcomer.py). The behaviour behind
them is tested in tests/test_data_inputs.py and tests/test_data_split.py.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

from tests.bad_input_cases import Case, bad_config
from tests.bad_input_edges import another_writer_holds
from tests.bad_input_newcomer import Notice

FIXTURE_V1 = Path(__file__).parent / "fixtures" / "prepared-v1"
TEXT = "a document of the corpus, " * 40 + "\n"


def corpus_with(**extra: Callable[[Path], None]) -> Callable[[Path], None]:
    """A setup: corpus/ with four text files, then `extra`'s changes (name -> make it)."""

    def setup(work: Path) -> None:
        (work / "corpus").mkdir()
        for i in range(4):
            (work / "corpus" / f"doc{i}.txt").write_text(f"document {i}: {TEXT}")
        for name, make in extra.items():
            make(work / "corpus" / name.replace("_", "."))

    return setup


def dangling(path: Path) -> None:
    path.symlink_to("notes-deleted.txt")


def hidden_corpus(work: Path) -> None:
    """corpus/ whose only text file is hidden."""
    (work / "corpus").mkdir()
    (work / "corpus" / ".notes.txt").write_text(TEXT * 4)


def png(path: Path) -> None:
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10")


def hidden(path: Path) -> None:
    path.mkdir()
    (path / "HEAD").write_text("ref: refs/heads/main\n")


def linked_directory(path: Path) -> None:
    elsewhere = path.parent.parent / "elsewhere"
    elsewhere.mkdir()
    for i in range(3):
        (elsewhere / f"more{i}.txt").write_text(f"more {i}: {TEXT}")
    path.symlink_to(Path("..") / "elsewhere")


def another_prepare_writes(work: Path) -> None:
    """A setup: corpus/, and another prepare holding the staging directory of --out data."""
    corpus_with()(work)
    another_writer_holds(".data.partial", "prepare corpus --out data")(work)


def prepared_v1(work: Path) -> None:
    shutil.copytree(FIXTURE_V1 / "data", work / "data")
    shutil.copy(FIXTURE_V1 / "corpus.txt", work / "corpus.txt")


def named_pipe(work: Path) -> None:
    """A setup: a named pipe that a thread fills once a reader opens it."""
    os.mkfifo(work / "corpus.pipe")

    def fill() -> None:
        with open(work / "corpus.pipe", "w") as f:
            f.write("".join(json.dumps({"text": f"record {i}: {TEXT}"}) + "\n" for i in range(9)))

    threading.Thread(target=fill, daemon=True).start()


def uneven_documents() -> str:
    """95 documents of 100 bytes and 5 of 20 KB where a fraction of 5% of the documents falls
    (documents 9, 29, ...): a fraction of the documents held out 91% of this text."""
    words = ["river", "stone", "lamp", "orbit", "cedar", "quartz", "violet", "harbor"]
    text = " ".join(words * 3000)
    documents = [text[: 20_000 if i % 20 == 9 else 100].strip() + "\n" for i in range(100)]
    return "%\n".join(documents) + "%\n"


PREPARE_CORPUS = ["prepare", "corpus", "--out", "data"]
CORPUS_CASES: list[Case] = [
    Case(
        "prepare-dangling-link",
        "data",
        "`prepare corpus` where corpus/ holds a link to a deleted file (it was skipped "
        "without a word)",
        PREPARE_CORPUS,
        "corpus/notes.txt: a link to notes-deleted.txt, which does not exist",
        setup=corpus_with(notes_txt=dangling),
    ),
    Case(
        "prepare-png-in-corpus",
        "data",
        "`prepare corpus` where corpus/ holds a PNG (it was told to convert it to UTF-8)",
        PREPARE_CORPUS,
        "corpus/figure.png: a PNG image, not text; leave it out of the inputs",
        setup=corpus_with(figure_png=png),
    ),
    Case(
        "prepare-only-hidden-files",
        "data",
        "`prepare corpus` where every text file of corpus/ is hidden (`.notes.txt`; it said only "
        "that the input was empty)",
        ["prepare", "corpus", "--out", "data"],
        "hold(s) only hidden files and directories (corpus/.notes.txt), which are skipped; name "
        "a hidden file as an INPUT to read it",
        setup=hidden_corpus,
    ),
    Case(
        "prepare-utf16",
        "data",
        "UTF-16 text, as Windows Notepad saves it (it was called binary)",
        ["prepare", "notes.txt", "--out", "data"],
        "notes.txt: UTF-16 text (it begins with the byte-order mark FF FE), not UTF-8; convert "
        "it to UTF-8 first: iconv -f UTF-16 -t UTF-8 notes.txt > notes-utf8.txt",
        files={"notes.txt": ("a document\n" * 30).encode("utf-16")},
    ),
    Case(
        "prepare-utf16-no-bom",
        "data",
        "UTF-16 text without a byte-order mark",
        ["prepare", "notes.txt", "--out", "data"],
        "notes.txt: UTF-16LE text (without a byte-order mark: every other byte is 0)",
        files={"notes.txt": ("a document\n" * 30).encode("utf-16-le")},
    ),
    Case(
        "prepare-gzip",
        "data",
        "a gzip-compressed corpus given as it is",
        ["prepare", "corpus.txt.gz", "--out", "data"],
        "corpus.txt.gz: a gzip-compressed file, not text; decompress it first",
        files={"corpus.txt.gz": b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03"},
    ),
    Case(
        "prepare-json-array",
        "data",
        'a .json file holding one JSON array over several lines (it was called "not a JSON line")',
        ["prepare", "corpus.json", "--out", "data"],
        "corpus.json: one JSON document (an array) over several lines, not JSON lines (one "
        "object per line); convert it: jq -c '.[]' corpus.json > corpus.jsonl",
        files={"corpus.json": json.dumps([{"text": TEXT}] * 3, indent=2)},
    ),
    Case(
        "prepare-separator-jsonl",
        "data",
        "`--separator %` for a JSONL file (it was silently ignored)",
        ["prepare", "corpus.jsonl", "--separator", "%", "--out", "data"],
        "--separator '%' applies to plain text files, and every input is jsonl",
        files={"corpus.jsonl": json.dumps({"text": TEXT}) + "\n"},
    ),
    Case(
        "prepare-out-inside-input",
        "data",
        "`prepare corpus --out corpus/data` (the next prepare of corpus/ read the data as text)",
        ["prepare", "corpus", "--out", "corpus/data"],
        "--out corpus/data: is inside the input directory",
        setup=corpus_with(),
    ),
    Case(
        "prepare-prepared-data",
        "data",
        "`prepare` of a directory `prepare` wrote",
        ["prepare", "data", "--out", "data2"],
        "data: prepared data (written by `fixedfirst prepare`), not text; name the text it was "
        "made from",
        needs=("data",),
    ),
    Case(
        "prepare-twice-into-one-out",
        "data",
        'a second `prepare` into the --out another is writing (it failed with "Directory not '
        'empty" after its whole run)',
        PREPARE_CORPUS,
        "--out data: another prepare is writing it now (PID 4242, `prepare corpus --out data`)",
        setup=another_prepare_writes,
    ),
    bad_config(
        "k0-on-uniform",
        "a K0 on a uniform schedule (it was silently ignored)",
        '[schedule]\nkind = "uniform"\nk0 = 3\n',
        "schedule.k0 = 3 does nothing with schedule.kind = 'uniform'",
    ),
    bad_config(
        "switch-section-without-auto",
        "an auto switch's rule for a run that switches at a fixed fraction",
        "[schedule]\nswitch = 0.5\n[switch]\nwindow = 0.3\n",
        "[switch] sets how schedule.switch = 'auto' decides",
    ),
    Case(
        "compute-sweep-file",
        "config",
        "`compute` given a sweep file (it was told `base` is a top-level key)",
        ["compute", "sweep.toml"],
        "sweep.toml is a sweep file (it has base, sweep, runs), not a run configuration",
        files={
            "sweep.toml": 'base = "tiny.toml"\n[sweep]\n[[runs]]\nname = "uniform"\n'
            'schedule.kind = "uniform"\n'
        },
        needs=("tiny.toml",),
    ),
    Case(
        "data-path-home",
        "config",
        '`data.path = "$HOME/data"` (it advised `prepare --out $HOME/data`, which the shell '
        "expands and the configuration does not)",
        ["train", "home.toml", "--out", "new-run"],
        "$HOME/data: no such data directory; a configuration does not expand environment variables",
        files={"home.toml": '[data]\nkind = "tokens"\npath = "$HOME/data"\n'},
    ),
]

CORPUS_NOTICES: list[Notice] = [
    Notice(
        "prepare-hidden-files",
        "data",
        "`prepare corpus` where corpus/ holds a .git directory (skipped without a word)",
        [*PREPARE_CORPUS, "--val-fraction", "0.3"],
        "note: corpus: skipped 1 hidden file(s) and directories: corpus/.git",
        setup=corpus_with(_git=hidden),
    ),
    Notice(
        "prepare-linked-directory",
        "data",
        "`prepare corpus` where corpus/more links to a directory elsewhere (skipped without a "
        'word: "inputs: 4" of 7 files)',
        [*PREPARE_CORPUS, "--val-fraction", "0.3"],
        "note: corpus: followed 1 link(s) to directories: corpus/more -> ../elsewhere",
        setup=corpus_with(more=linked_directory),
    ),
    Notice(
        "prepare-named-pipe",
        "data",
        "a named pipe holding JSON lines (it hung forever: it was read twice)",
        ["prepare", "corpus.pipe", "--out", "data", "--val-fraction", "0.3"],
        "note: corpus.pipe: not a regular file, read once (jsonl)",
        setup=named_pipe,
    ),
    Notice(
        "prepare-val-fraction",
        "data",
        "`--val-fraction 0.05` on 100 documents, five of them 200 times the others' size (a "
        "fraction of the documents held out 91% of the text)",
        ["prepare", "uneven.txt", "--separator", "%", "--val-fraction", "0.05", "--out", "data"],
        "validation: ",
        files={"uneven.txt": uneven_documents()},
    ),
    Notice(
        "prepare-format-1-kept",
        "data",
        "`prepare` again into data an earlier fixedfirst prepared from the same inputs "
        "(format 1: a fraction of the documents held out)",
        ["prepare", "corpus.txt", "--separator", "%", "--val-fraction", "0.2", "--out", "data"],
        "note: kept as prepared by an earlier fixedfirst (format 1",
        setup=prepared_v1,
    ),
]
