"""`--resume` with a metrics.jsonl that lost its end (issue 57, point 5): a file cut inside a
line is cut back to its last whole line, so the resumed records start on a line of their own
(they completed the half line, and the file was refused by every reader after), and a file cut
short or deleted is said, with the steps whose records are lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixedfirst.config import load_config
from fixedfirst.train.metrics import read_metrics
from fixedfirst.train.trainer import Trainer
from tests.trainer_helpers import write_tiny_config


@pytest.fixture
def paused(tmp_path) -> Path:
    """A run paused at step 8 (checkpoints at 4 and 8)."""
    run = tmp_path / "run"
    Trainer(load_config(write_tiny_config(tmp_path)), run, quiet=True).train(stop_after=8)
    return run


def resume(run: Path, stop_after: int) -> None:
    config = load_config(run / "config.toml")
    Trainer(config, run, quiet=True, resume=True).train(stop_after=stop_after)


def steps(run: Path) -> list[int]:
    return [r["step"] for r in read_metrics(run / "metrics.jsonl", "train")]


def test_a_file_cut_inside_a_line_is_cut_back_and_said(paused, capsys):
    metrics = paused / "metrics.jsonl"
    text = metrics.read_bytes()
    fifth = text.index(b'"step": 5')
    metrics.write_bytes(text[: fifth + 20])  # inside the record of step 5
    resume(paused, 12)
    assert steps(paused) == [1, 2, 3, 4, 9, 10, 11, 12]  # every line whole and readable
    err = capsys.readouterr().err
    assert (
        f"note: {metrics} was cut short ({fifth + 20:,} of the {len(text):,} bytes the "
        "checkpoint at step 8 recorded) in the middle of a line: cut back to its last whole "
        "line (line 4); the records after it up to step 8 are lost"
    ) in err


def test_a_torn_end_after_the_checkpoint_goes_without_a_word(paused, capsys):
    """What a process killed mid-write leaves after its last checkpoint: cut, as ever, to the
    checkpoint's length, which ends on a whole line; nothing is lost, nothing said."""
    with open(paused / "metrics.jsonl", "a") as f:
        f.write('{"kind": "train", "step": 9, "lo')
    resume(paused, 12)
    assert steps(paused) == list(range(1, 13))
    assert "note:" not in capsys.readouterr().err


def test_a_deleted_file_is_said(paused, capsys):
    (paused / "metrics.jsonl").unlink()
    resume(paused, 10)
    assert steps(paused) == [9, 10]
    assert (
        f"note: {paused / 'metrics.jsonl'} is missing (deleted?): the records of steps 1..8 "
        "are lost; a new one starts at step 9"
    ) in capsys.readouterr().err
