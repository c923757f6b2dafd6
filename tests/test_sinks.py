"""`train.log_to`: TensorBoard event files and an offline W&B run hold the scalars of
metrics.jsonl, read back with TensorBoard's own event reader and from W&B's run file; a resumed run
continues the same curves without a duplicated step; a missing package is one line."""

from __future__ import annotations

import importlib.util
import json
import shutil
import struct
import sys
import time
from pathlib import Path

import pytest

from fixedfirst.cli.main import main
from fixedfirst.train.metrics import read_metrics
from fixedfirst.train.trainer import Trainer
from tests.trainer_helpers import tiny_config, write_tiny_config

pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(name) for name in ("tensorboard", "wandb")),
    reason="tensorboard and wandb are not both installed",
)
"""Found, not imported: wandb costs a second of CPU to import, in the worker that runs these."""

TRAIN_KEYS = ("loss", "lr", "grad_norm", "depth", "tok_per_s", "mfu")


@pytest.fixture(autouse=True)
def wandb_offline(monkeypatch, tmp_path):
    """No account, no network, nothing written outside the test's directory."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home"))


def train(run: Path, *overrides: str, stop_after: int, resume: bool = False) -> None:
    config = tiny_config("eval.every=4", *overrides)
    Trainer(config, str(run), resume=resume, quiet=True).train(stop_after=stop_after)


def tensorboard_scalars(run: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    return {
        tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]
    }


def wandb_file_records(path: Path):
    """The protobuf records of a W&B run file (.wandb: a header, then LevelDB-log blocks)."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, pending, block = 7, b"", 32768
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 0:  # padding at the end of a block
            pos += block - pos % block if pos % block else 0
        elif kind in (1, 4):  # a whole record, or the last piece of one
            yield pending + chunk
            pending = b""
        else:  # the first or a middle piece
            pending += chunk


def wandb_history(run: Path, last_step: int) -> list[list[dict]]:
    """The history rows of each offline W&B run file under RUN/wandb, oldest first, once the
    newest file holds `last_step` (W&B's service process may still be writing the file when
    `finish()` has returned)."""
    from wandb.proto import wandb_internal_pb2

    deadline = time.monotonic() + 30
    while True:
        out = []
        for path in sorted((run / "wandb").glob("offline-run-*/run-*.wandb")):
            rows = []
            for raw in wandb_file_records(path):
                record = wandb_internal_pb2.Record()
                record.ParseFromString(raw)
                if record.WhichOneof("record_type") == "history":
                    items = record.history.item
                    rows.append(
                        {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items}
                    )
            out.append(rows)
        if (out and out[-1] and out[-1][-1]["_step"] == last_step) or time.monotonic() > deadline:
            return out
        time.sleep(0.2)


def check_tensorboard_matches_metrics(run: Path, axis, measured: bool = True) -> None:
    """Every scalar of metrics.jsonl in TensorBoard, at its step on `axis`. measured=False: not
    the clock's (tok/s, MFU, wall), which a resumed run measures anew for the steps it redoes
    while TensorBoard keeps the first measurement."""
    scalars = tensorboard_scalars(run)
    train = read_metrics(run / "metrics.jsonl", "train")
    evals = read_metrics(run / "metrics.jsonl", "eval")
    keys = [f"train/{k}" for k in TRAIN_KEYS] + ["progress/tokens", "progress/flops"]
    keys += ["progress/wall"]
    for tag in keys:
        field = tag.split("/")[1]
        steps = [axis(r) for r in train]
        assert [s for s, _ in scalars[tag]] == steps, tag
        if measured or field not in ("tok_per_s", "mfu", "wall"):
            want = [pytest.approx(float(r[field]), rel=1e-6) for r in train]
            assert [v for _, v in scalars[tag]] == want, tag
    for depth in ("1", "2", "4"):
        want = [(axis(r), pytest.approx(r["nll_by_depth"][depth], rel=1e-6)) for r in evals]
        assert scalars[f"eval/nll_depth_{depth}"] == want
    assert len(evals) >= 2


def test_tensorboard_holds_the_metrics_of_metrics_jsonl(tmp_path):
    run = tmp_path / "run"
    train(run, 'train.log_to=["tensorboard"]', stop_after=8)
    check_tensorboard_matches_metrics(run, lambda r: r["step"])
    assert not (run / "wandb").exists()


def test_modeled_flops_as_the_x_axis(tmp_path):
    run = tmp_path / "run"
    train(run, 'train.log_to=["tensorboard"]', "train.log_axis=flops", stop_after=8)
    check_tensorboard_matches_metrics(run, lambda r: round(r["flops"] / 1e6))


def test_wandb_offline_run_holds_the_metrics(tmp_path):
    run = tmp_path / "run"
    train(run, 'train.log_to=["wandb"]', stop_after=8)
    run_id = (run / "wandb-run-id").read_text().strip()
    (only,) = sorted((run / "wandb").glob("offline-run-*"))
    assert only.name.endswith(run_id) and (only / f"run-{run_id}.wandb").is_file()
    (rows,) = wandb_history(run, last_step=8)
    train_records = read_metrics(run / "metrics.jsonl", "train")
    assert [row["_step"] for row in rows] == [r["step"] for r in train_records]
    for row, record in zip(rows, train_records, strict=True):
        for key in TRAIN_KEYS:
            assert row[f"train/{key}"] == pytest.approx(record[key], rel=1e-6)
        assert row["progress/flops"] == pytest.approx(record["flops"])
    evals = read_metrics(run / "metrics.jsonl", "eval")
    logged = {row["_step"]: row for row in rows if "eval/nll_depth_4" in row}
    assert sorted(logged) == [r["step"] for r in evals]
    for record in evals:
        assert logged[record["step"]]["eval/nll_depth_4"] == pytest.approx(
            record["nll_by_depth"]["4"]
        )


def test_resume_continues_the_curves_without_duplicated_steps(tmp_path):
    """Interrupted after step 10 with the last checkpoint at 8: the resumed run makes steps 9
    and 10 again; neither TensorBoard nor W&B gets them twice."""
    run = tmp_path / "run"
    log_to = 'train.log_to=["tensorboard", "wandb"]'
    train(run, log_to, stop_after=10)
    shutil.rmtree(run / "checkpoints" / "step-0000010")  # as if killed after step 10
    train(run, log_to, stop_after=16, resume=True)
    steps = [r["step"] for r in read_metrics(run / "metrics.jsonl", "train")]
    assert steps == list(range(1, 17))
    assert [s for s, _ in tensorboard_scalars(run)["train/loss"]] == steps
    assert len(list((run / "tensorboard").glob("events.out.tfevents*"))) == 2
    before, after = wandb_history(run, last_step=16)
    assert [row["_step"] for row in before] == list(range(1, 11))
    assert [row["_step"] for row in after] == list(range(11, 17))
    check_tensorboard_matches_metrics(run, lambda r: r["step"], measured=False)


def test_a_sink_added_on_resume_starts_at_step_one(tmp_path):
    run = tmp_path / "run"
    train(run, stop_after=8)
    train(run, 'train.log_to=["tensorboard"]', stop_after=12, resume=True)
    assert [s for s, _ in tensorboard_scalars(run)["train/loss"]] == list(range(1, 13))


def test_a_missing_package_is_one_line_naming_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)  # importlib then finds no wandb
    config = write_tiny_config(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(
            [
                "train",
                str(config),
                "--out",
                str(tmp_path / "run"),
                "--set",
                'train.log_to=["wandb"]',
            ]
        )
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and len(err) == 1, err
    assert "needs the wandb package: pip install 'fixedfirst[wandb]'" in err[0]
    assert not (tmp_path / "run").exists()


def test_wandb_that_cannot_start_is_one_line(tmp_path, monkeypatch):
    import wandb

    from fixedfirst.errors import UserError

    def no_login(*args, **kwargs):
        raise wandb.errors.UsageError("api_key not configured (no-tty)")

    monkeypatch.setattr(wandb, "init", no_login)
    with pytest.raises(UserError, match="WANDB_MODE=offline") as info:
        train(tmp_path / "run", 'train.log_to=["wandb"]', stop_after=1)
    assert "api_key not configured" in str(info.value)
    assert not (tmp_path / "run" / "config.toml").exists()  # nothing to --resume
