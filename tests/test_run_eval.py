"""Depth-wise evaluation of a run: `fixedfirst eval`, its JSON, the saved-evaluation cache, and
`fixedfirst figure3`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixedfirst.cli.main import main
from fixedfirst.evaluation.cached import HeldOut, cached_evaluation, eval_path
from fixedfirst.stats.intervals import t_interval
from fixedfirst.studies.sweep.figure3 import shown_depths, trailing_mean
from fixedfirst.train.trainer import Trainer
from tests.trainer_helpers import tiny_config

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
EVAL_KEYS = {
    "format": str,
    "version": int,
    "run": str,
    "schedule": str,
    "data": str,
    "step": int,
    "tokens": int,
    "weights_sha256": str,
    "depths": list,
    "batches": int,
    "batch_size": int,
    "scored_tokens": int,
    "validation_seed": (int, type(None)),
    "sequences": int,
    "validation_sha256": str,
    "rows": type(None),
    "precision": str,
    "nll_by_depth": dict,
    "mean_serving_nll": float,
    "row_nll": dict,
    "row_tokens": list,
    "interval_by_depth": dict,
    "checkpoint": type(None),  # trained from scratch: no checkpoint, no "before"
    "base": type(None),
}


def run_cli(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err


@pytest.fixture(scope="module")
def fixed_first_run(tmp_path_factory) -> Path:
    """A finished 10-step fixed-first run (switch after 5 steps) with evaluations every 2."""
    run = tmp_path_factory.mktemp("runs") / "ff"
    config = tiny_config("train.tokens=1280", "eval.every=2", "train.checkpoint_every=0")
    Trainer(config, str(run), quiet=True).train()
    return run


def test_eval_json_schema(capsys, fixed_first_run):
    code, out, _ = run_cli(capsys, "eval", fixed_first_run, "--depths", "1..16,32")
    assert code == 0
    assert "mean serving NLL (depths 1..16)" in out
    result = json.loads(eval_path(fixed_first_run, 10).read_text())
    assert set(result) == set(EVAL_KEYS)
    for key, kind in EVAL_KEYS.items():
        assert isinstance(result[key], kind), key
    assert result["format"] == "fixedfirst-eval" and result["version"] == 1
    assert result["step"] == 10 and result["tokens"] == 1280
    assert result["depths"] == [*range(1, 17), 32]
    assert list(result["nll_by_depth"]) == [str(d) for d in result["depths"]]
    assert result["batches"] == 1 and result["batch_size"] == 4  # eval.batches, micro-batch
    assert result["scored_tokens"] == 1 * 4 * 16
    assert result["sequences"] == 4 and result["validation_seed"] is None  # the first rows
    mean = sum(result["nll_by_depth"][str(d)] for d in range(1, 17)) / 16
    assert result["mean_serving_nll"] == pytest.approx(mean)
    # Every row scores 16 tokens, so at each depth the rows' NLLs average to the set's.
    for d, value in result["nll_by_depth"].items():
        rows = result["row_nll"][d]
        assert len(rows) == 4 and sum(rows) / 4 == pytest.approx(value, abs=1e-6)
        # Blocks of equal length: the interval over them is the t-interval of their means.
        plain = t_interval(rows)
        bounds = result["interval_by_depth"][d]
        assert (bounds["low"], bounds["high"]) == pytest.approx((plain.low, plain.high), abs=1e-5)
    assert result["row_tokens"] == [16] * 4
    assert result["precision"] == "fp32" and result["rows"] is None


def test_eval_without_all_serving_depths_has_no_mean(tmp_path, capsys, fixed_first_run):
    out = tmp_path / "e.json"
    assert run_cli(capsys, "eval", fixed_first_run, "--depths", "1,2", "--out", out)[0] == 0
    result = json.loads(out.read_text())
    assert result["mean_serving_nll"] is None and list(result["nll_by_depth"]) == ["1", "2"]


def test_eval_refuses_an_output_directory_that_does_not_exist(tmp_path, capsys, fixed_first_run):
    code, _, err = run_cli(capsys, "eval", fixed_first_run, "--out", tmp_path / "no" / "e.json")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "does not exist" in err


def test_saved_evaluation_is_reused_only_for_the_same_question(fixed_first_run):
    depths = [1, 2, 3]
    first, reused = cached_evaluation(fixed_first_run, depths, HeldOut(batches=2))
    assert not reused
    again, reused = cached_evaluation(fixed_first_run, depths, HeldOut(batches=2))
    assert reused and again == first
    other, reused = cached_evaluation(fixed_first_run, depths, HeldOut(batches=1))
    assert not reused and other["batches"] == 1
    other, reused = cached_evaluation(fixed_first_run, [1, 2], HeldOut(batches=1))
    assert reused and other["depths"] == [1, 2]  # the saved evaluation holds them
    assert list(other["nll_by_depth"]) == ["1", "2"]
    path = eval_path(fixed_first_run, 10)
    path.write_text(path.read_text().replace(first["weights_sha256"], "0" * 64))
    _, reused = cached_evaluation(fixed_first_run, [1, 2], HeldOut(batches=1))
    assert not reused  # other weights: measured again


def test_figure3_of_a_fixed_first_run(tmp_path, capsys, fixed_first_run):
    out = tmp_path / "fig3.png"
    code, stdout, _ = run_cli(capsys, "figure3", fixed_first_run, "--out", out)
    assert code == 0 and str(out) in stdout
    assert out.read_bytes()[:8] == PNG_MAGIC and out.stat().st_size > 10_000


def test_figure3_refuses_a_run_without_a_switch(tmp_path, capsys):
    run = tmp_path / "uniform"
    config = tiny_config("train.tokens=256", "schedule.kind=uniform")
    Trainer(config, str(run), quiet=True).train()
    code, _, err = run_cli(capsys, "figure3", run, "--out", tmp_path / "f.png")
    assert code == 2 and "needs a fixed-first run" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "f.png").exists()


def test_trailing_mean_never_looks_ahead():
    values = [1.0, 1.0, 1.0, 5.0, 5.0]
    assert trailing_mean(values, 2) == [1.0, 1.0, 1.0, 3.0, 5.0]
    assert trailing_mean(values, 1) == values


def test_figure3_shows_depths_1_4_16_when_evaluated():
    assert shown_depths([1, 2, 4, 8, 16, 32]) == [1, 4, 16]
    assert shown_depths([2, 3]) == [2, 3]
    assert shown_depths([2, 3, 5, 6, 7]) == [2, 5, 7]
