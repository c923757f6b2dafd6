"""Bad input a researcher on a shared cluster meets first (issue 27): an --out holding someone
else's files, a run whose config.toml was edited or deleted, data that moved, a branch that
cannot be one, and messages that used to point the wrong way. Part of the bad-input table
(`all_cases` in tests/bad_input_cases.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.bad_input_cases import Case, checkpoint_dir


def users_own_files(work: Path) -> None:
    """A directory of the user's: their own config.toml and metrics.jsonl."""
    (work / "mine").mkdir()
    (work / "mine" / "config.toml").write_text("mine\n")
    (work / "mine" / "metrics.jsonl").write_text("mine\n")


def edit_run_config(old: str, new: str):
    def edit(work: Path) -> None:
        config = work / "run" / "config.toml"
        config.write_text(config.read_text().replace(old, new))

    return edit


def checkpoints_is_a_file(work: Path) -> None:
    """A run that failed before its first checkpoint, and a file named `checkpoints` in it."""
    shutil.rmtree(work / "run" / "checkpoints")
    (work / "run" / "checkpoints").write_text("notes\n")


def old_checkpoints_without_config(work: Path) -> None:
    """config.toml deleted from a run whose checkpoints predate stored configurations."""
    (work / "run" / "config.toml").unlink()
    for step in (4, 8):
        meta_file = checkpoint_dir(work, "run", step) / "meta.json"
        meta = json.loads(meta_file.read_text())
        del meta["config"]
        meta_file.write_text(json.dumps(meta))


def move_data(work: Path) -> None:
    shutil.move(work / "data", work / "moved-data")
    shutil.rmtree(work / "tokens-run" / "tokenizer")  # as runs made before it was copied in


def shrink_data_vocabulary(work: Path) -> None:
    """meta.json's vocab_size edited below the ids its shards hold."""
    meta_file = work / "data" / "meta.json"
    meta = json.loads(meta_file.read_text())
    meta["vocab_size"] = 100
    meta_file.write_text(json.dumps(meta))


CLUSTER_CASES: list[Case] = [
    # --out: never someone else's directory.
    Case(
        "out-foreign-files",
        "command line",
        "`--out` a directory holding the user's own config.toml and metrics.jsonl",
        ["train", "tiny.toml", "--out", "mine"],
        "--out mine holds files fixedfirst did not write (config.toml, metrics.jsonl); nothing "
        "was written",
        needs=("tiny.toml",),
        setup=users_own_files,
    ),
    Case(
        "out-foreign-files-force",
        "command line",
        "`--out` that directory with `--force`",
        ["train", "tiny.toml", "--out", "mine", "--force"],
        "--force never replaces them",
        needs=("tiny.toml",),
        setup=users_own_files,
    ),
    Case(
        "out-empty",
        "command line",
        "`--out ''`",
        ["train", "tiny.toml", "--out", ""],
        "--out is empty; name the run directory",
        needs=("tiny.toml",),
    ),
    Case(
        "out-data-directory",
        "command line",
        "`--out` the prepared data directory",
        ["train", "tokens.toml", "--out", "data", "--force"],
        "--out data is a prepared data directory",
        needs=("tokens.toml", "data"),
    ),
    Case(
        "checkpoints-is-a-file",
        "checkpoint",
        "`--resume` of a run in which a file named `checkpoints` took the directory's place",
        ["train", "--out", "run", "--resume", "--quiet"],
        "run/checkpoints exists and is not a directory",
        needs=("run",),
        setup=checkpoints_is_a_file,
    ),
    # --resume: the same run, whatever config.toml now says.
    Case(
        "resume-edited-k0",
        "checkpoint",
        "`--resume` after K0 was edited in the run's config.toml",
        ["train", "--out", "run", "--resume", "--quiet"],
        "what defines the run changed since step-0000008: schedule.k0 (2 in the run, 4 now)",
        needs=("run",),
        setup=edit_run_config("k0 = 2", "k0 = 4"),
    ),
    Case(
        "resume-edited-tokens",
        "checkpoint",
        "`--resume` after the token budget was edited in the run's config.toml",
        ["train", "--out", "run", "--resume", "--quiet"],
        "train.tokens (6144 in the run, 12288 now)",
        needs=("run",),
        setup=edit_run_config("tokens = 6144", "tokens = 12288"),
    ),
    Case(
        "resume-set-lr",
        "checkpoint",
        "`--resume --set train.lr=1e-3` (the run trained at 3e-3)",
        ["train", "--out", "run", "--resume", "--set", "train.lr=1e-3"],
        "train.lr (0.003 in the run, 0.001 now); a resume continues the same run",
        needs=("run",),
    ),
    Case(
        "resume-no-config-old-checkpoints",
        "checkpoint",
        "`--resume` of a run without config.toml whose checkpoints do not store it",
        ["train", "--out", "run", "--resume"],
        "run has checkpoints but no config.toml, and they were written before checkpoints "
        "stored the configuration",
        needs=("run",),
        setup=old_checkpoints_without_config,
    ),
    # Branches.
    Case(
        "branch-other-model",
        "checkpoint",
        "`branch --set model.d_model=64` (a branch keeps the weights)",
        ["branch", "run", "--out", "wider", "--set", "model.d_model=64"],
        "a branch keeps the model and the data",
        needs=("run",),
    ),
    Case(
        "branch-past-the-end",
        "checkpoint",
        "`branch` at step 8 with a budget of 4 steps",
        ["branch", "run", "--out", "short", "--set", "train.tokens=512"],
        "the branch point, step 8, is not before the end of the new run (4 steps)",
        needs=("run",),
    ),
    # Data that moved, or is not what it says.
    Case(
        "eval-data-moved",
        "data",
        "`eval` of a run whose data directory moved",
        ["eval", "tokens-run"],
        "the data of tokens-run is not at data (its data.path) any more: pass --data PATH",
        needs=("tokens-run", "data"),
        setup=move_data,
    ),
    Case(
        "generate-data-moved",
        "data",
        "`generate` of a run without its own tokenizer copy whose data moved",
        ["generate", "tokens-run", "--prompt", "the"],
        "pass --data PATH where it is now",
        needs=("tokens-run", "data"),
        setup=move_data,
    ),
    Case(
        "diagnose-data-moved",
        "data",
        "`diagnose` of a run whose data moved",
        ["diagnose", "tokens-run", "--checkpoint", "4"],
        "pass --data PATH where it is now",
        needs=("tokens-run", "data"),
        setup=move_data,
    ),
    Case(
        "eval-data-wrong",
        "data",
        "`eval --data` naming a directory that does not exist",
        ["eval", "tokens-run", "--data", "nowhere"],
        "--data nowhere: no such data directory",
        needs=("tokens-run", "data"),
        setup=move_data,
    ),
    Case(
        "data-path-is-a-file",
        "data",
        "`data.path` naming the corpus file instead of the prepared directory",
        ["train", "tokens.toml", "--out", "new-run", "--set", "data.path=corpus.txt"],
        "corpus.txt is a file; the data path names the directory",
        needs=("tokens.toml", "corpus.txt"),
    ),
    Case(
        "data-vocabulary-edited",
        "data",
        "a data meta.json whose vocab_size was edited below its tokenizer's",
        ["train", "tokens.toml", "--out", "new-run", "--set", "model.vocab_size=100"],
        "data/meta.json: vocab_size = 100 but its tokenizer has 257 ids",
        needs=("tokens.toml", "data"),
        setup=shrink_data_vocabulary,
    ),
    Case(
        "prepare-tiny-corpus",
        "data",
        "`prepare` of a 12-byte corpus",
        ["prepare", "twelve.txt", "--out", "small-data"],
        "11 bytes of text are too little to split into training and validation text",
        files={"twelve.txt": "hello world\n"},
    ),
    # Messages that named the wrong thing.
    Case(
        "config-is-a-device",
        "config",
        "`compute /dev/null`",
        ["compute", "/dev/null"],
        "config file '/dev/null' is not a regular file",
    ),
    Case(
        "set-date-time",
        "config",
        "`--set train.seed=1979-05-27T07:32:00Z` (TOML reads a date-time)",
        ["compute", "tiny.toml", "--set", "train.seed=1979-05-27T07:32:00Z"],
        "got the date-time 1979-05-27T07:32:00+00:00 (quote it for a string)",
        needs=("tiny.toml",),
    ),
    Case(
        "generate-max-depth-zero",
        "generate",
        "`generate --exit kl --max-depth 0`",
        ["generate", "run", "--prompt", "x", "--exit", "kl", "--max-depth", "0"],
        "--max-depth must be an integer >= 1, got 0",
        needs=("run",),
    ),
]
