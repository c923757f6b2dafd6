"""Faults around checkpoints, end to end through the command line.

- The disk fills up (or the run directory stops being writable) while a checkpoint is written:
  one clear line, exit 2, the previous checkpoint intact and no half-written one left behind;
  `--resume` then finishes the run exactly as if nothing had happened.
- The disk really fills up (a small tmpfs, where this process may mount one) while a
  checkpoint, an export or prepared data is written: one line naming the full disk, nothing
  left behind.
- A checkpoint file gets a flipped byte: `eval` and `--resume` name the file, say (on stderr,
  even with --quiet) they fall back to the previous checkpoint, and the resumed run is again
  exactly the uninterrupted one.

(The tests run as root, for whom permission bits do not block writes, so the failing write is
simulated by making the checkpoint writer raise the OSError the kernel would give.)
"""

from __future__ import annotations

import errno
import io
import os
import subprocess
from pathlib import Path

import pytest
import torch

from fixedfirst.cli.main import main
from fixedfirst.runs import checkpoint
from fixedfirst.runs.checkpoint import CheckpointManager
from tests.bad_input_cases import flip_byte
from tests.test_crash import assert_same_run
from tests.trainer_helpers import write_tiny_config


@pytest.fixture
def reference(tiny_run):
    """The uninterrupted run (the session's tiny run) that every interrupted one must equal."""
    return tiny_run.path


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


# -- a disk that is really full ----------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """`small_disk(size)`: a real file system of `size` (tmpfs) that fills up; skipped where
    this process may not mount one (it needs root)."""
    mounts = []

    def mount(size: str) -> Path:
        point = tmp_path / f"disk-{len(mounts)}"
        point.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounts.append(point)
        return point

    yield mount
    for point in mounts:
        subprocess.run(["umount", str(point)], check=False)


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_a_full_disk_while_checkpointing_is_one_line_then_resumes(
    small_disk, tmp_path, capsys, reference
):
    """1 MiB holds the step-4 checkpoint (682 kB), not step 8 beside it."""
    disk = small_disk("1m")
    config = write_tiny_config(tmp_path)
    run = disk / "run"
    assert cli("train", config, "--out", run, "--quiet") == 2
    err = one_line(capsys.readouterr().err)
    assert (
        f"cannot write checkpoint {run}/checkpoints/step-0000008 (No space left on device)" in err
    )
    assert "the previous checkpoint (step-0000004) is intact; the disk is full: free space" in err
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-0000004"]
    CheckpointManager(run / "checkpoints").all()[0].verify()
    subprocess.run(["mount", "-o", "remount,size=8m", str(disk)], check=True)  # space freed
    assert cli("train", "--out", run, "--resume", "--quiet") == 0
    assert_same_run(reference, run)


@pytest.mark.parametrize("format_", ["fixedfirst", "hf"])
def test_a_full_disk_while_exporting_is_one_line_and_leaves_nothing(
    small_disk, text_run, capsys, format_
):
    if format_ == "hf":
        pytest.importorskip("transformers")
    disk = small_disk("128k")  # the weights alone are 270 kB
    out = disk / "exports" / "e"
    assert cli("export", text_run / "run", "--out", out, "--format", format_) == 2
    err = one_line(capsys.readouterr().err)
    assert f"cannot write {out}: No space left on device; the disk is full: free space" in err
    assert list(disk.iterdir()) == []  # no temporary directory, no parents made for it


def test_a_full_disk_while_preparing_data_is_one_line_and_leaves_nothing(
    small_disk, tmp_path, capsys
):
    disk = small_disk("128k")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n%\n".join(f"document {i} " + "word " * 40 for i in range(600)))
    assert cli("prepare", corpus, "--separator", "%", "--out", disk / "data") == 2
    err = one_line(capsys.readouterr().err)
    assert f"cannot write {disk}/data: No space left on device; the disk is full" in err
    assert list(disk.iterdir()) == []


def test_the_system_error_behind_a_library_write_error(tmp_path):
    """safetensors and torch.save do not raise the OSError of a full disk; the checkpoint
    writer finds it behind theirs (tested here without a full disk)."""
    from safetensors import SafetensorError

    from fixedfirst.files.writing import os_error_behind

    message = "Error while serializing: I/O error: No space left on device (os error 28)"
    found = os_error_behind(SafetensorError(message), tmp_path / "model.safetensors")
    assert (found.errno, found.strerror) == (errno.ENOSPC, os.strerror(errno.ENOSPC))

    class FillingFile(io.RawIOBase):
        """Takes 1000 bytes, then the disk is full."""

        written = 0

        def writable(self) -> bool:
            return True

        def write(self, data) -> int:
            if self.written + len(data) > 1000:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self.written += len(data)
            return len(data)

    with pytest.raises((RuntimeError, OSError)) as info:
        torch.save({"x": torch.zeros(1000)}, FillingFile())
    assert os_error_behind(info.value, tmp_path / "trainer.pt").errno == errno.ENOSPC
    assert os_error_behind(RuntimeError("a bug"), tmp_path / "x") is None
