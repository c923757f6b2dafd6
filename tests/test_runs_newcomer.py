"""Issue 57 on runs and exports, beyond the bad-input table: an export's weights are checked when
it is loaded (point 4), `export` of a run that saves a checkpoint meanwhile says so (point 8),
and `inspect` writes its page and picture both or neither (point 9)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil

import matplotlib.figure
import pytest

import fixedfirst
from fixedfirst.cli.main import main
from fixedfirst.errors import UserError
from fixedfirst.export import writer
from tests.bad_input_cases import flip_byte


def cli(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err


@pytest.fixture
def run(text_run, tmp_path):
    """A copy of the session's tiny text run (its data where the copy says)."""
    copy = tmp_path / "run"
    shutil.copytree(text_run / "run", copy)
    return copy


def test_an_export_is_the_checkpoints_weights_file_and_is_checked_when_loaded(run, tmp_path):
    out = tmp_path / "exported"
    config = writer.export_run(run, out)
    weights = (out / "model.safetensors").read_bytes()
    # What the check rests on: the export's file is the checkpoint's, byte for byte.
    assert hashlib.sha256(weights).hexdigest() == config["source"]["weights_sha256"]
    fixedfirst.load(out)  # whole: loads
    flip_byte(out / "model.safetensors")
    with pytest.raises(UserError, match="changed since `fixedfirst export` wrote it"):
        fixedfirst.load(out)


def test_export_of_a_run_that_saves_meanwhile_says_so(run, tmp_path, capsys, monkeypatch):
    """A checkpoint saved while the export was written is not one that "failed its checks"."""
    export_run = writer.export_run

    def training_meanwhile(source, out, step=None):
        config = export_run(source, out, step)
        exported = config["source"]["step"]
        newer = run / "checkpoints" / f"step-{exported + 4:07d}"
        shutil.copytree(run / "checkpoints" / f"step-{exported:07d}", newer)
        meta = json.loads((newer / "meta.json").read_text())
        (newer / "meta.json").write_text(json.dumps({**meta, "step": exported + 4}))
        return config

    monkeypatch.setattr(writer, "export_run", training_meanwhile)
    code, _, err = cli(capsys, "export", run, "--out", tmp_path / "exported")
    assert code == 0
    assert "while this export was written (it is training); export again when it has " in err
    assert "failed their checks" not in err


def test_a_page_without_room_for_its_picture_is_not_left_behind(run, tmp_path, capsys, monkeypatch):
    page = tmp_path / "page.html"
    code, _, err = cli(capsys, "inspect", run, "--prompt", "river stone", "--out", page)
    assert code == 0, err
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}

    def disk_full(self, fname, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(fname))

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", disk_full)
    code, _, err = cli(capsys, "inspect", run, "--prompt", "lamp orbit", "--out", page)
    assert code == 2
    assert "No space left on device; the disk is full" in err and "nothing was left behind" in err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
