"""The edges a newcomer hit on a corpus nobody here wrote (issue 41), as bad-input cases.

`NEWCOMER_CASES` are refusals (part of the bad-input table: `all_cases` in
tests/bad_input_cases.py). `NOTICES` are commands that do what was asked and must say what they
did: an empty configuration trains the built-in synthetic language, a plan of a short run, a
corpus too small for a default evaluation. They form the second table of
docs/reference/bad-input.md, checked by tests/test_bad_input.py the same way: the line the
command prints is the row.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tests.bad_input_cases import Case, Outcome, bad_config, flip_byte

# -- damage ------------------------------------------------------------------------------------


def flip_validation_shard(work: Path) -> None:
    flip_byte(work / "data" / "val-00000.bin")


def flip_training_shard(work: Path) -> None:
    flip_byte(work / "data" / "train-00000.bin")


def delete_data_tokenizer(work: Path) -> None:
    shutil.rmtree(work / "data" / "tokenizer")


def small_corpus() -> str:
    """60 short documents (61 KB): too little for 1% or even 10% of them to hold out what a
    default evaluation scores."""
    rng = np.random.default_rng(41)
    words = ["river", "stone", "lamp", "orbit", "cedar", "quartz", "violet", "harbor"]
    documents = [" ".join(rng.choice(words, size=rng.integers(100, 250))) for _ in range(60)]
    return "\n%\n".join(documents) + "\n"


NEWCOMER_CASES: list[Case] = [
    Case(
        "shard-changed-eval",
        "data",
        "`eval --data` of data whose validation shard had one byte flipped after `prepare`",
        ["eval", "tokens-run", "--data", "data"],
        "data/val-00000.bin: tokens 0..6,900 are not what `fixedfirst prepare` wrote",
        needs=("tokens-run", "data"),
        setup=flip_validation_shard,
    ),
    Case(
        "shard-changed-train",
        "data",
        "training on data whose training shard had one byte flipped after `prepare`",
        ["train", "tokens.toml", "--out", "new-run"],
        "data/train-00000.bin: tokens 0..27,436 are not what `fixedfirst prepare` wrote",
        needs=("tokens.toml", "data"),
        setup=flip_training_shard,
    ),
    Case(
        "shard-changed-prepare-again",
        "data",
        "`prepare` again, same inputs and options, into data whose shard had a byte flipped",
        ["prepare", "corpus.txt", "--out", "data", "--separator", "%", "--val-fraction", "0.2"],
        "--out data: holds this data, but tokens 0..27,436 of train-00000.bin changed since it "
        "was prepared",
        needs=("corpus.txt", "data"),
        setup=flip_training_shard,
    ),
    Case(
        "data-without-tokenizer",
        "data",
        "`data.path` naming a prepared directory whose tokenizer/ was deleted (no run "
        "directory is made)",
        ["train", "tokens.toml", "--out", "new-run"],
        "data: the prepared data is incomplete: its tokenizer "
        "(data/tokenizer/fixedfirst-tokenizer.json) is missing",
        needs=("tokens.toml", "data"),
        setup=delete_data_tokenizer,
    ),
    bad_config(
        "data-path-empty",
        "an empty data path",
        '[data]\nkind = "tokens"\npath = ""\n',
        "data.path: is empty; set it to the directory written by `fixedfirst prepare`",
    ),
    bad_config(
        "key-above-first-section",
        "a key above the first section header",
        "vocab_size = 257\n[model]\nd_model = 64\n",
        "vocab_size = 257 is a top-level key (it comes before the first [section] header), "
        "and every key belongs to a section: move it below [model]",
    ),
    bad_config(
        "unknown-key-above-first-section",
        "an unknown key above the first section header",
        "colour = 3\n[model]\nd_model = 64\n",
        "colour = 3 is a top-level key (it comes before the first [section] header), and every "
        "key belongs to a section: no section has that key",
    ),
    Case(
        "eval-limit-nll",
        "command line",
        "`eval --limit 1000` with the default `--task nll`",
        ["eval", "run", "--limit", "1000"],
        "--limit 1000 applies to a task's own metric (--task KIND, e.g. bios)",
        needs=("run",),
    ),
    Case(
        "eval-limit-zero-nll",
        "command line",
        "`eval --limit 0` with the default `--task nll`",
        ["eval", "run", "--limit", "0"],
        "--limit 0 applies to a task's own metric",
        needs=("run",),
    ),
]


@dataclass
class Notice(Case):
    """A command that succeeds and must say what it did: its `fragment` is the words one line
    of its stdout must begin with (the table shows that whole line)."""

    recorded: tuple[str, str] | None = None
    """(file, words): a JSON file the command writes must hold the words too."""


NOTICES: list[Notice] = [
    Notice(
        "empty-config-trains-synthetic",
        "config",
        "a 0-byte configuration (no [data]), one step",
        ["train", "empty.toml", "--out", "new-run", "--stop-after", "1"],
        "data: the built-in synthetic language",
        files={"empty.toml": ""},
        recorded=("new-run/summary.json", "the built-in synthetic language"),
    ),
    Notice(
        "eval-of-synthetic-run",
        "command line",
        "`eval` of a run trained on a configuration without [data]",
        ["eval", "run", "--depths", "1"],
        "data: the built-in synthetic language",
        needs=("run",),
        recorded=("run/eval-step-0000008.json", "the built-in synthetic language"),
    ),
    Notice(
        "plan-short-run",
        "plan",
        '`plan` of a run that takes microseconds on the GPU (it said "0 min")',
        ["plan", "tiny.toml", "--gpu", "h100"],
        "wall-clock on 1 GPU(s), each depth at its MFU:",
        needs=("tiny.toml",),
    ),
    Notice(
        "prepare-small-corpus",
        "data",
        "`prepare` of 61 KB of text in 60 documents (10% of them hold out less than a "
        "default evaluation scores)",
        ["prepare", "small.txt", "--separator", "%", "--out", "small-data"],
        "note: the validation split holds 49 sequences of train.seq_len + 1 = 129 tokens, "
        "fewer than the 64 an evaluation scores at the defaults",
        files={"small.txt": small_corpus()},
    ),
]


def all_notices() -> list[Notice]:
    """Every notice of the second table: these, then issue 57's (tests/bad_input_corpus.py,
    tests/bad_input_runs.py)."""
    from tests.bad_input_corpus import CORPUS_NOTICES
    from tests.bad_input_runs import RUN_NOTICES

    return NOTICES + CORPUS_NOTICES + RUN_NOTICES


def told(notice: Notice, outcome: Outcome, work: Path) -> str | None:
    """The first stdout line that begins with the notice's words, when the command succeeded,
    wrote nothing on stderr and recorded the words where the notice says; else None."""
    if outcome.code not in (0, None) or outcome.stderr:
        return None
    stripped = (line.strip() for line in outcome.stdout.splitlines())
    lines = [line for line in stripped if line.startswith(notice.fragment)]
    if not lines:
        return None
    if notice.recorded is not None:
        name, words = notice.recorded
        if words not in json.dumps(json.loads((work / name).read_text())):
            return None
    return lines[0]


def notice_header(count: int) -> str:
    return NOTICE_HEADER.format(count=count)


NOTICE_HEADER = """
## Told, not refused

{count} cases where the command does what it was asked and says what it did, one row each.
Every row is a test (`tests/test_bad_input.py`, cases in `tests/bad_input_newcomer.py`,
`tests/bad_input_corpus.py` and `tests/bad_input_runs.py`): exit status 0, no traceback, the
line shown here on stdout (and, where a file is named, in that file too), no file that was on
disk before changed. The same script writes this table.
Not in it: the inspection PNG's title, where a long `--prompt` or run path is shortened in the
middle to fit the picture instead of running off both sides (tests/test_inspect.py).

| # | area | the user gives | what they are told (stdout, exit status 0) |
| --- | --- | --- | --- |
"""


def notice_row(number: int, notice: Notice, line: str) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    where = f" (and in `{notice.recorded[0]}`)" if notice.recorded else ""
    return f"| N{number} | {notice.area} | {cell(notice.given)} | `` {cell(line)} ``{where} |"
