"""The hard edges of issue 15, end to end: a moved run still evaluates, generates and exports;
one writer per run; Ctrl-C saves and says how to resume; incomplete checkpoints never trap a
run; a run that saved nothing can be started again; files are readable like the rest."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time

import pytest

from fixedfirst.cli.main import main
from fixedfirst.runs.directory import CONFIG_MARK
from fixedfirst.train.interrupt import REQUEUE_STATUS
from fixedfirst.train.trainer import Trainer
from tests.test_crash import ROOT, assert_same_run, resume_here, start, wait_for
from tests.trainer_helpers import TINY_TOML, tiny_config, train_records, write_tiny_config


def cli(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err


@pytest.fixture
def reference(tiny_run):
    """The uninterrupted run (the session's tiny run) that every interrupted one must equal."""
    return tiny_run.path


def test_a_moved_run_evaluates_generates_and_exports(text_run, tmp_path, capsys, monkeypatch):
    """The config names its data relative to itself; the run stores it absolute and keeps its
    tokenizer, so from anywhere else a moved copy needs only the validation data."""
    project = tmp_path / "project"
    (project / "configs").mkdir(parents=True)
    shutil.copytree(text_run / "data", project / "data")
    config = (text_run / "run.toml").read_text().replace('path = "data"', 'path = "../data"')
    (project / "configs" / "run.toml").write_text(config)
    monkeypatch.chdir(project)
    args = ["train", "configs/run.toml", "--out", "run", "--quiet", "--set", "train.tokens=1024"]
    assert cli(capsys, *args)[0] == 0
    assert (project / "run" / "tokenizer").is_dir()
    assert f'path = "{project / "data"}"' in (project / "run" / "config.toml").read_text()

    moved = tmp_path / "elsewhere" / "moved-run"
    moved.parent.mkdir()
    shutil.move(project / "run", moved)
    monkeypatch.chdir(tmp_path / "elsewhere")
    code, out, err = cli(capsys, "eval", "moved-run", "--depths", "1,2")
    assert code == 0, err
    assert "moved-run step 2:" in out
    shutil.rmtree(project / "data")  # generation and export need nothing outside the run
    code, out, err = cli(capsys, "generate", "moved-run", "--prompt", "the", "--max-new-tokens", 3)
    assert code == 0, err
    code, out, err = cli(capsys, "export", "moved-run", "--out", "exports/a/b")  # parents made
    assert code == 0, err
    assert (tmp_path / "elsewhere" / "exports" / "a" / "b" / "tokenizer").is_dir()


def test_two_concurrent_writers_the_second_is_refused(tmp_path, capsys, reference):
    config = write_tiny_config(tmp_path)
    run = tmp_path / "run"
    release = tmp_path / "release"
    held = (".tmp-step-0000004", release)  # the first writer is mid-run, lock held, until released
    first = start(["train", str(config), "--out", str(run), "--quiet"], held)
    wait_for(lambda: (run / "checkpoints" / held[0] / "model.safetensors").exists(), first)
    try:  # the second writer is this process
        code, _, err = cli(capsys, "train", "--out", run, "--resume", "--quiet")
    finally:
        release.touch()
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"is being written by another fixedfirst process (PID {first.pid}, `train`)" in err
    assert first.wait(timeout=300) == 0, first.stderr.read().decode()
    steps = [r["step"] for r in train_records(run)]
    assert steps == sorted(set(steps)) == list(range(1, 49))  # no duplicated rows
    assert not (run / ".lock").exists()
    assert_same_run(reference, run)


SLOW_STEPS = """
import sys, time
import fixedfirst.train.trainer as trainer
original = trainer.train_step
def slow(*args, **kwargs):
    time.sleep(0.3)
    return original(*args, **kwargs)
trainer.train_step = slow
from fixedfirst.cli.main import main
main(sys.argv[1:])
"""


def start_slow(args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", SLOW_STEPS, *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def test_a_second_ctrl_c_stops_at_once(tmp_path):
    config = write_tiny_config(tmp_path)
    run = tmp_path / "run"
    proc = start_slow(["train", str(config), "--out", str(run), "--quiet"])
    wait_for(lambda: (run / "checkpoints" / "step-0000004" / "meta.json").exists(), proc)
    before = sorted(p.name for p in (run / "checkpoints").iterdir())
    proc.send_signal(signal.SIGINT)
    time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # within the same 0.3 s step
    assert proc.wait(timeout=60) == 130
    err = proc.stderr.read().decode()
    assert err.strip().splitlines()[-1] == "fixedfirst train: interrupted"
    assert "Traceback" not in err
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == before


@pytest.mark.parametrize(
    ("signum", "sent", "status", "reason"),
    [
        (signal.SIGINT, 1, 130, "interrupted"),
        # A scheduler's preemption, reaching the process twice (a second Ctrl-C would stop at
        # once; a second SIGTERM still waits for the checkpoint), then a requeue and a resume.
        (signal.SIGTERM, 2, REQUEUE_STATUS, "stopped by SIGTERM"),
    ],
    ids=["ctrl-c", "sigterm"],
)
def test_a_stop_signal_saves_a_checkpoint_and_prints_the_resume_command(
    tmp_path, reference, signum, sent, status, reason
):
    config = write_tiny_config(tmp_path)
    run = tmp_path / "run"
    proc = start_slow(["train", str(config), "--out", str(run), "--quiet"])
    wait_for(lambda: (run / "checkpoints" / "step-0000004" / "meta.json").exists(), proc)
    for _ in range(sent):
        proc.send_signal(signum)
        time.sleep(0.05)  # within the same 0.3 s step
    assert proc.wait(timeout=120) == status
    err = proc.stderr.read().decode()
    assert "Traceback" not in err
    first, last = err.strip().splitlines()
    assert first.endswith("stopping after this step to save a checkpoint") or "Ctrl-C" in first
    assert last.startswith(f"fixedfirst train: {reason}: saved step-")
    assert last.endswith(f"; resume with `fixedfirst train --resume --out {run}`")
    step = last.split("saved ")[1].split(";")[0]
    saved = json.loads((run / "checkpoints" / step / "meta.json").read_text())
    assert "paused" in saved["tags"] and 4 < saved["step"] < 48
    assert not (run / ".lock").exists()
    resume_here(run)
    assert_same_run(reference, run)


def test_a_stop_signal_before_training_starts_is_kept_for_the_first_step(tmp_path):
    """A job preempted while it still sets up trains one step, saves it and stops."""
    from fixedfirst.train.interrupt import TrainingInterrupted, stop_requests_kept

    run = tmp_path / "run"
    with stop_requests_kept(), pytest.raises(TrainingInterrupted) as info:
        os.kill(os.getpid(), signal.SIGUSR1)  # before the trainer exists
        Trainer(tiny_config(), run, quiet=True).train()
    assert info.value.exit_status == REQUEUE_STATUS and info.value.reason == "stopped by SIGUSR1"
    assert [r["step"] for r in train_records(run)] == [1]
    saved = json.loads((run / "checkpoints" / "step-0000001" / "meta.json").read_text())
    assert saved["tags"] == ["paused"]
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL  # handlers put back


def test_an_incomplete_final_checkpoint_is_named_and_set_aside(tmp_path, capsys, reference):
    config = write_tiny_config(tmp_path)
    run = tmp_path / "run"
    assert cli(capsys, "train", config, "--out", run, "--quiet")[0] == 0
    final = run / "checkpoints" / "step-0000048"
    (final / "meta.json").unlink()

    code, out, err = cli(capsys, "eval", run, "--depths", "1")
    assert code == 0, err
    assert "step 44:" in out and f"checkpoint {final} is incomplete" in err
    assert "using step 44" in err

    code, out, err = cli(capsys, "train", "--out", run, "--resume", "--quiet")
    assert code == 0, err
    assert f"checkpoint {final} is incomplete (no valid meta.json); moved it to" in err
    assert (run / "checkpoints" / "incomplete-step-0000048" / "model.safetensors").is_file()
    assert_same_run(reference, run)


def test_a_run_that_saved_no_checkpoint_starts_again_with_a_corrected_config(tmp_path, capsys):
    config = write_tiny_config(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    # an earlier attempt that failed before step 1
    (run / "config.toml").write_text(CONFIG_MARK + TINY_TOML)
    (run / "metrics.jsonl").write_text('{"kind": "train", "step": 1}\n')
    code, _, err = cli(capsys, "train", config, "--out", run, "--quiet", "--set", "train.lr=1e-3")
    assert code == 0, err
    assert "held a run that saved no checkpoint; started over" in err
    assert "lr = 0.001" in (run / "config.toml").read_text()
    assert [r["step"] for r in train_records(run)] == list(range(1, 49))
    assert cli(capsys, "train", config, "--out", run)[0] == 2  # now it holds checkpoints


def test_weights_are_readable_like_every_other_file(tmp_path, capsys):
    old = os.umask(0o022)
    try:
        config = write_tiny_config(tmp_path)
        run = tmp_path / "run"
        assert cli(capsys, "train", config, "--out", run, "--quiet", "--stop-after", "4")[0] == 0
        assert cli(capsys, "export", run, "--out", tmp_path / "exported")[0] == 0
    finally:
        os.umask(old)
    for path in (
        run / "checkpoints" / "step-0000004" / "model.safetensors",
        tmp_path / "exported" / "model.safetensors",
        run / "config.toml",
    ):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


def test_export_says_when_it_exports_an_older_checkpoint(tmp_path, capsys):
    config = write_tiny_config(tmp_path)
    run = tmp_path / "run"
    assert cli(capsys, "train", config, "--out", run, "--quiet", "--stop-after", "8")[0] == 0
    code, _, err = cli(capsys, "export", run, "--out", tmp_path / "e", "--checkpoint", "4")
    assert code == 0
    assert "note: exported step 4, not the newest checkpoint (step 8): as asked" in err


def test_nproc_splits_the_batch_without_a_micro_batch_size(tmp_path, monkeypatch):
    """micro_batch_size unset means each rank's share, so 2 processes split a batch of 8."""
    config = tmp_path / "c.toml"
    config.write_text(TINY_TOML.replace("micro_batch_size = 4\n", ""))
    from fixedfirst.train import launcher

    launched = []
    monkeypatch.setattr(launcher, "launch", lambda nproc, *_: launched.append(nproc) or 0)
    main_args = ["train", str(config), "--out", str(tmp_path / "run"), "--nproc", "2"]
    with pytest.raises(SystemExit) as info:
        main(main_args)
    assert info.value.code == 0 and launched == [2]


def test_a_run_written_before_paths_were_absolute_still_finds_its_data(
    text_run, tmp_path, capsys, monkeypatch
):
    """Older runs stored data.path as typed, relative to where they were trained."""
    shutil.copytree(text_run / "run", tmp_path / "old-run")
    shutil.copytree(text_run / "data", tmp_path / "data")
    config = tmp_path / "old-run" / "config.toml"
    config.write_text(config.read_text().replace(f'"{text_run / "data"}"', '"data"'))
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "eval", "old-run", "--depths", "1")
    assert code == 0, err
    assert "old-run step" in out
