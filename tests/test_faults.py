"""Faults around checkpoints, end to end through the command line.

- The disk fills up (or the run directory stops being writable) while a checkpoint is written:
  one clear line, exit 2, the previous checkpoint intact and no half-written one left behind;
  `--resume` then finishes the run exactly as if nothing had happened.
- A checkpoint file gets a flipped byte: `eval` and `--resume` name the file, say (on stderr,
  even with --quiet) they fall back to the previous checkpoint, and the resumed run is again
  exactly the uninterrupted one.

(The tests run as root, for whom permission bits do not block writes, so the failing write is
simulated by making the checkpoint writer raise the OSError the kernel would give.)
"""

from __future__ import annotations

import errno
import os

import pytest

from fixedfirst.cli.main import main
from fixedfirst.train import checkpoint
from fixedfirst.train.checkpoint import CheckpointManager
from fixedfirst.train.trainer import Trainer
from tests.bad_input_cases import flip_byte
from tests.test_crash import assert_same_run
from tests.trainer_helpers import tiny_config, write_tiny_config


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    run = tmp_path_factory.mktemp("reference") / "run"
    Trainer(tiny_config(), run, quiet=True).train()
    return run


def cli(*args) -> int:
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    return info.value.code


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EACCES], ids=["disk-full", "unwritable"])
def test_failed_checkpoint_write_keeps_the_previous_one(
    tmp_path, monkeypatch, capsys, reference, error
):
    config = write_tiny_config(tmp_path)
    run = tmp_path / "run"
    write_file = checkpoint._write_file

    def failing(path, write):  # the second checkpoint (step 8) fails after its weights file
        if path.parent.name == ".tmp-step-0000008" and path.name == "trainer.pt":
            raise OSError(error, os.strerror(error), str(path))
        return write_file(path, write)

    monkeypatch.setattr(checkpoint, "_write_file", failing)
    assert cli("train", config, "--out", run, "--quiet") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"cannot write checkpoint {run}/checkpoints/step-0000008 ({os.strerror(error)})" in err
    assert "the previous checkpoint (step-0000004) is intact" in err
    ckpts = CheckpointManager(run / "checkpoints").all()
    assert [c.step for c in ckpts] == [4]
    ckpts[0].verify()
    assert not list((run / "checkpoints").glob(".tmp-*"))

    monkeypatch.undo()  # space freed
    assert cli("train", "--out", run, "--resume", "--quiet") == 0
    assert_same_run(reference, run)


def test_flipped_byte_is_named_and_resume_falls_back(tmp_path, capsys, reference):
    config = write_tiny_config(tmp_path)
    run = tmp_path / "run"
    assert cli("train", config, "--out", run, "--quiet", "--stop-after", "8") == 0
    flip_byte(run / "checkpoints" / "step-0000008" / "model.safetensors")
    capsys.readouterr()
    warning = (
        f"warning: checkpoint {run}/checkpoints/step-0000008: model.safetensors is corrupt "
        "(checksum mismatch); falling back to the previous checkpoint"
    )

    assert cli("eval", run, "--depths", "1,2") == 0
    captured = capsys.readouterr()  # the warning on stderr, never inside the table on stdout
    assert warning in captured.err and warning not in captured.out
    assert f"{run} step 4:" in captured.out

    assert cli("train", "--out", run, "--resume", "--quiet") == 0
    captured = capsys.readouterr()
    assert warning in captured.err  # --quiet silences progress, never a warning
    assert "resume: continuing" not in captured.out
    assert_same_run(reference, run)
