"""`fixedfirst diagnose` end to end on a tiny fixed-first run trained here, and its refusals."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from fixedfirst.cli.main import main
from fixedfirst.runs.checkpoint import META_FILE, TRAINER_FILE, CheckpointManager, sha256
from fixedfirst.stats.intervals import two_way_bootstrap
from fixedfirst.studies.diagnose.figure import figure4
from fixedfirst.studies.diagnose.finishing import FinishingChain, open_run_state
from fixedfirst.studies.diagnose.report import report_markdown, with_intervals
from fixedfirst.studies.diagnose.runner import DiagnoseOptions, run_diagnostic
from fixedfirst.studies.diagnose.summary import contained_from, first_u_containing_zero
from fixedfirst.train.trainer import Trainer
from tests.report_checks import assert_report_remade
from tests.trainer_helpers import tiny_config

SWITCH = 24  # the tiny config: 48 steps, switch 0.5
SMALL = ["--batches", "3", "--depths", "2,4", "--serving-depths", "1..4", "--heldout", "4"]


@pytest.fixture
def fixed_first_run(tiny_run):
    """48 steps, switch at step 24, a checkpoint every 4 steps, all kept (the session's run)."""
    return tiny_run.path


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(["diagnose", *map(str, argv)])
    out = capsys.readouterr()
    return exit_info.value.code, out.out, out.err


def test_finishing_steps_reproduce_the_trainer(fixed_first_run):
    """u updates from the switch checkpoint land on the trainer's own weights at switch + u."""
    state = open_run_state(fixed_first_run)
    assert state.step == SWITCH
    chain = FinishingChain(state)
    batch_size = state.config.train.batch_size
    checkpoints = CheckpointManager(fixed_first_run / "checkpoints")
    for step in (28, 32):
        while chain.step < step:
            chain.advance(state.source.next_batch(batch_size))
        saved = load_file(checkpoints.at_step(step).path / "model.safetensors")
        live = state.model.state_dict()
        for name, tensor in saved.items():
            assert torch.equal(live[name], tensor), (step, name)
    assert [s.step for s in chain.history] == list(range(SWITCH, 32))


def test_pair_updates_start_from_identical_states(fixed_first_run):
    options = DiagnoseOptions(
        updates=[0, 2], batches=2, depths=(2, 4), serving_depths=[1, 2, 4], heldout=4
    )
    results = run_diagnostic(fixed_first_run, options, quiet=True, record_digests=True).results
    digests = results["start_digests"]
    assert len(digests) == 4
    assert all(a == b for a, b in digests)
    assert digests[0] == digests[1]  # the same state for every batch of one u ...
    assert digests[1] != digests[2]  # ... and another one two finishing steps later


def bootstrap(x, tokens, over="both"):
    """The interval the diagnostic must report for x[batch, sequence] (its defaults)."""
    return two_way_bootstrap(x, 0.95, 2000, 0, tokens, over)


def test_diagnose_end_to_end(fixed_first_run, tmp_path, capsys):
    out = tmp_path / "diag"
    code, stdout, _ = run_cli(capsys, fixed_first_run, "--updates", "0,1,4", *SMALL, "--out", out)
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    assert results["switch_step"] == SWITCH
    assert results["checkpoint"]["step"] == SWITCH and "switch" in results["checkpoint"]["tags"]
    assert results["depths"] == {"shallow": 2, "deep": 4}
    assert results["serving_depths"] == [1, 2, 3, 4]
    assert results["batches"] == 3 and results["updates"] == [0, 1, 4]
    assert results["rms_reference"] == "geometric-mean"
    interval = results["interval"]
    assert interval["kind"] == "two-way bootstrap over training batches and held-out sequences"
    assert interval["level"] == 0.95 and interval["resamples"] == 2000
    assert "held-out sequences" in interval["covers"]
    assert results["run"] == str(fixed_first_run)
    assert [s["step"] for s in results["finishing_steps"]] == [24, 25, 26, 27]

    # The per-sequence benefits beside results.json, named by their checksum.
    saved = results["per_sequence"]
    assert saved["file"] == "benefit_per_sequence.npy"
    assert saved["sha256"] == sha256(out / saved["file"])
    benefit = np.load(out / saved["file"])
    assert benefit.shape == (3, 3, 4, 4) and saved["shape"] == [3, 3, 4, 4]
    tokens = np.array(results["heldout"]["tokens_per_sequence"], dtype=float)
    assert tokens.shape == (4,) and tokens.sum() == results["heldout"]["tokens"]

    rows = results["results"]
    assert [r["u"] for r in rows] == [0, 1, 4]
    assert [r["step"] for r in rows] == [24, 25, 28]
    for index, row in enumerate(rows):
        x = benefit[index]  # (batch, sequence, depth)
        assert set(row["benefit"]) == {"1", "2", "3", "4"}
        # Token-weighted over sequences by hand, then the mean over batches.
        per_batch = np.einsum("bjk,j->bk", x, tokens) / tokens.sum()
        assert np.allclose(row["per_batch_benefit"], per_batch, rtol=0, atol=1e-15)
        for j, k in enumerate("1234"):
            stats = row["benefit"][k]
            assert stats["mean"] == pytest.approx(per_batch[:, j].mean(), abs=1e-15)
            expected = bootstrap(x[:, :, j], tokens)
            assert (stats["low"], stats["high"]) == (expected.low, expected.high)
            assert stats["mean"] == pytest.approx(
                row["nll_after_shallow"][k] - row["nll_after_deep"][k], abs=1e-9
            )
        average = row["depth_average"]
        assert average["mean"] == pytest.approx(per_batch.mean(), abs=1e-15)
        expected = bootstrap(x.mean(axis=2), tokens)
        assert (average["low"], average["high"]) == (expected.low, expected.high)
        assert average["se_batches_only"] == bootstrap(x.mean(axis=2), tokens, "rows").se
        assert average["se_heldout_only"] == bootstrap(x.mean(axis=2), tokens, "columns").se
        assert row["contains_zero"] == (average["low"] <= 0 <= average["high"])
        # Bands 1..2 and 3..4: serving depths at or below the shallow update's, and above.
        for name, columns in (("1..2", [0, 1]), ("3..4", [2, 3])):
            expected = bootstrap(x[:, :, columns].mean(axis=2), tokens)
            band = row["bands"][name]
            assert (band["low"], band["high"]) == (expected.low, expected.high)
            assert band["mean"] == pytest.approx(per_batch[:, columns].mean(), abs=1e-15)
    containing = [r["u"] for r in rows if r["contains_zero"]]
    assert results["first_u_contains_zero"] == (containing[0] if containing else None)

    png = (out / "figure4.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    assert "depth-averaged benefit" in stdout and "contains 0" in stdout
    assert "| 4 |" in stdout  # the per-depth table
    assert "held-out sequences only" in stdout and "3 training batches x 4 held-out" in stdout
    # What it printed is report.md, made from report.json alone: the benefit of every batch on
    # every held-out sequence at every depth, every digit, from which it draws the intervals
    # again; they are results.json's.
    assert stdout.startswith((out / "report.md").read_text())
    numbers = json.loads((out / "report.json").read_text())
    assert numbers["version"] == 2 and numbers["heldout"]["tokens_per_sequence"] == tokens.tolist()
    for index, row in enumerate(numbers["results"]):
        assert np.array_equal(np.array(row["benefit_per_sequence"]), benefit[index])
        assert "depth_average" not in row and "per_batch_benefit" not in row
    drawn = with_intervals(numbers)
    for again, row in zip(drawn["results"], rows, strict=True):
        for key in ("benefit", "depth_average", "bands"):
            assert again[key] == row[key]
    assert drawn["contains_zero_from_u"] == results["contains_zero_from_u"]
    assert_report_remade(out, report_markdown, report_markdown(results), tmp_path)


def test_figure_draws_the_bootstrap_intervals(fixed_first_run, tmp_path, capsys):
    """The right panel's error bars end at the depth-averaged intervals of results.json; the
    left panel's bands at the per-depth ones."""
    out = tmp_path / "diag"
    code, _, _ = run_cli(capsys, fixed_first_run, "--updates", "0,2", *SMALL, "--out", out)
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    left, right = figure4(results).axes
    assert "bootstrap" in right.get_title() and "bootstrap" in left.get_title()
    (bars,) = [c for c in right.collections if c.get_segments()]
    ends = sorted((x0, y0, y1) for (x0, y0), (_, y1) in bars.get_segments())
    rows = results["results"]
    want = [(r["u"], r["depth_average"]["low"], r["depth_average"]["high"]) for r in rows]
    assert np.allclose(ends, want, rtol=0, atol=1e-18)
    # The u = 0 band of the left panel: its outline passes through (k, low) and (k, high).
    outline = left.collections[0].get_paths()[0].vertices
    for k in "1234":
        at_k = outline[outline[:, 0] == int(k), 1]
        stats = rows[0]["benefit"][k]
        for end in (stats["low"], stats["high"]):
            assert np.isclose(at_k, end, rtol=0, atol=1e-18).any()


def test_a_second_run_into_the_same_out_replaces_every_file(fixed_first_run, tmp_path, capsys):
    out = tmp_path / "diag"
    argv = [fixed_first_run, "--updates", "0", *SMALL, "--out", out]
    assert run_cli(capsys, *argv, "--seed", "1")[0] == 0
    first = json.loads((out / "results.json").read_text())["per_sequence"]["sha256"]
    assert run_cli(capsys, *argv, "--seed", "2")[0] == 0
    second = json.loads((out / "results.json").read_text())["per_sequence"]["sha256"]
    assert second != first and second == sha256(out / "benefit_per_sequence.npy")


@pytest.mark.parametrize("results_json", [None, {"format": "fixedfirst-diagnose"}])
def test_a_per_sequence_file_results_json_does_not_name_is_refused(
    fixed_first_run, tmp_path, capsys, results_json
):
    """Left by an interrupted run or by someone else: neither read as ours nor overwritten."""
    out = tmp_path / "diag"
    out.mkdir()
    stale = out / "benefit_per_sequence.npy"
    np.save(stale, np.zeros(3))
    before = stale.read_bytes()
    if results_json is not None:
        (out / "results.json").write_text(json.dumps(results_json))
    code, _, err = run_cli(capsys, fixed_first_run, "--updates", "0", *SMALL, "--out", out)
    assert code == 2 and err.count("\n") == 1
    assert "benefit_per_sequence.npy that its results.json does not name" in err
    assert stale.read_bytes() == before
    assert not (out / "figure4.png").exists()


@pytest.mark.parametrize("name", ["results.json", "report.json", "report.md"])
def test_an_out_holding_someone_elses_file_is_refused(fixed_first_run, tmp_path, capsys, name):
    """A report.md counts as ours only beside a report.json of ours; nothing is overwritten."""
    out = tmp_path / "diag"
    out.mkdir()
    (out / name).write_text("mine\n")
    code, _, err = run_cli(capsys, fixed_first_run, "--updates", "0", *SMALL, "--out", out)
    assert code == 2 and err.count("\n") == 1
    assert f"holds a {name} that fixedfirst did not write" in err
    assert [p.name for p in out.iterdir()] == [name] and (out / name).read_text() == "mine\n"


def test_equal_depths_give_zero_benefit_end_to_end(fixed_first_run):
    options = DiagnoseOptions(
        updates=[0, 3], batches=2, depths=(3, 3), serving_depths=[1, 3, 5], heldout=4
    )
    diagnosis = run_diagnostic(fixed_first_run, options, quiet=True)
    results = diagnosis.results
    assert (diagnosis.benefit_per_sequence == 0.0).all()
    for row in results["results"]:
        assert row["per_batch_benefit"] == [[0.0, 0.0, 0.0]] * 2
        assert row["depth_average"]["mean"] == 0.0 and row["contains_zero"]
        assert row["depth_average"]["low"] == row["depth_average"]["high"] == 0.0
    assert results["first_u_contains_zero"] == 0


def test_first_u_and_contained_from():
    def rows(flags):
        return [
            {"u": u, "depth_average": {"contains_zero": flag}}
            for u, flag in zip([0, 1, 2, 4, 8], flags, strict=True)
        ]

    assert first_u_containing_zero(rows([False, True, False, True, True])) == 1
    assert contained_from(rows([False, True, False, True, True])) == 4
    assert first_u_containing_zero(rows([False] * 5)) is None
    assert contained_from(rows([True, True, True, True, False])) is None
    assert contained_from(rows([True] * 5)) == 0


def test_a_uniform_run_is_refused_with_directions(tmp_path, capsys):
    run = tmp_path / "uniform"
    Trainer(tiny_config("schedule.kind=uniform", "train.tokens=512"), run, quiet=True).train()
    code, _, err = run_cli(capsys, run, "--out", tmp_path / "out")
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "uniform 1..6" in err and "no switch point" in err
    assert "schedule.kind=fixed-first" in err and "saves the checkpoint tagged 'switch'" in err


def test_a_missing_run_is_refused(tmp_path, capsys):
    code, _, err = run_cli(capsys, tmp_path / "nowhere")
    assert code == 2 and "does not exist" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--updates", "0,-1"], "integers >= 0"),
        (["--updates", "0,x"], "comma-separated integers"),
        (["--batches", "1"], "--batches must be >= 2"),
        (["--depths", "4"], "expected two depths"),
        (["--depths", "0,4"], "depths must be >= 1"),
        (["--heldout", "1"], "--heldout must be >= 2"),
        (["--resamples", "50"], "--resamples must be >= 100"),
        (["--updates", "24"], "use updates <= 23"),
        (["--checkpoint", "nonesuch"], "no checkpoint tagged 'nonesuch'"),
    ],
)
def test_bad_arguments_are_one_line_errors(fixed_first_run, tmp_path, capsys, argv, message):
    code, _, err = run_cli(capsys, fixed_first_run, *argv, "--out", tmp_path / "out")
    assert code == 2
    assert message in err and err.count("\n") == 1


def _rewrite_trainer_state(run, edit) -> None:
    """Edit the switch checkpoint's trainer state and re-seal its checksum."""
    ckpt = CheckpointManager(run / "checkpoints").with_tag("switch")
    meta = json.loads((ckpt.path / META_FILE).read_text())
    edit(ckpt.path / TRAINER_FILE, meta)
    if (ckpt.path / TRAINER_FILE).exists():
        meta["files"][TRAINER_FILE] = sha256(ckpt.path / TRAINER_FILE)
    (ckpt.path / META_FILE).write_text(json.dumps(meta))


def _drop_optimizer(path, meta) -> None:
    state = torch.load(path, weights_only=True)
    del state["optimizer"]
    torch.save(state, path)


def _weights_only(path, meta) -> None:
    path.unlink()
    del meta["files"][TRAINER_FILE]


@pytest.mark.parametrize("edit", [_drop_optimizer, _weights_only])
def test_a_switch_checkpoint_without_optimizer_state_is_refused(
    fixed_first_run, tmp_path, capsys, edit
):
    run = tmp_path / "run"
    shutil.copytree(fixed_first_run, run)
    _rewrite_trainer_state(run, edit)
    code, _, err = run_cli(capsys, run, "--out", tmp_path / "out")
    assert code == 2 and "no optimizer state" in err and err.count("\n") == 1


def test_headline_follows_the_intervals_per_band():
    """A depth average that contains zero at u = 16 but not at u = 32 is no finding of 'faded by
    16'; a band whose intervals contain zero from some u on is reported from that u."""
    from fixedfirst.studies.diagnose.report import headline
    from fixedfirst.studies.diagnose.summary import depth_bands

    def interval(mean, low, high):
        return {"mean": mean, "low": low, "high": high, "contains_zero": low <= 0 <= high}

    rows = []
    for u, avg, shallow, deep in [
        (0, (1e-5, 2e-5), (-1e-3, 1e-3), (5e-5, 6e-5)),
        (16, (-1e-6, 1e-6), (-1e-4, 1e-4), (1e-6, 2e-6)),
        (32, (-3e-5, -2e-5), (-1e-5, 1e-5), (-1e-6, 1e-6)),
    ]:
        rows.append(
            {
                "u": u,
                "depth_average": interval(sum(avg) / 2, *avg),
                "bands": {
                    "1..4": interval(sum(shallow) / 2, *shallow),
                    "5..16": interval(sum(deep) / 2, *deep),
                },
            }
        )
    assert contained_from(rows) is None
    assert contained_from(rows, "1..4") == 0
    assert contained_from(rows, "5..16") == 32
    results = {
        "results": rows,
        "depths": {"shallow": 4, "deep": 16},
        "contains_zero_from_u": None,
        "contains_zero_from_u_by_band": {"1..4": 0, "5..16": 32},
    }
    lines = headline(results)
    assert "no u from which every later interval contains 0 (u = 32 excludes it)" in lines[0]
    assert "favours the shallow depth" in lines[0]
    assert lines[1] == "serving depths 1..4: every interval from u = 0 on contains 0"
    assert lines[2] == "serving depths 5..16: every interval from u = 32 on contains 0"
    assert depth_bands([1, 2, 4, 8, 16, 32], 4, 16) == {
        "1..4": [1, 2, 4],
        "5..16": [8, 16],
        ">16": [32],
    }


def test_summary_weights_sequences_by_their_scored_tokens():
    """Held-out sequences of unequal length: every mean is per token (a sequence counts by its
    scored tokens) and every interval resamples with those weights."""
    from fixedfirst.studies.diagnose.summary import IntervalSettings, Measurements
    from fixedfirst.studies.diagnose.update_pair import HeldoutNLL, PairResult

    depths, tokens = [1, 2], np.array([10.0, 1.0, 5.0])
    rng = np.random.default_rng(0)
    deep = rng.normal(2.0, 0.1, size=(4, 3, 2))
    shallow = deep + rng.normal(0.0, 0.01, size=(4, 3, 2))
    measured = Measurements(4, 3, depths)
    for i in range(4):
        result = PairResult(
            HeldoutNLL(depths, shallow[i], tokens), HeldoutNLL(depths, deep[i], tokens), 1, 1, 1
        )
        measured.add(i, result)
    settings = IntervalSettings(0.9, 500, 3)
    summary = measured.summary(HeldoutNLL(depths, deep[0], tokens), {"1..2": [1, 2]}, settings)
    x = shallow - deep
    for j, k in enumerate("12"):
        by_hand = sum(tokens[s] * x[:, s, j] for s in range(3)).mean() / 16.0
        assert summary["benefit"][k]["mean"] == pytest.approx(by_hand, abs=1e-15)
        expected = two_way_bootstrap(x[:, :, j], 0.9, 500, 3, tokens)
        assert summary["benefit"][k]["low"] == expected.low
        assert summary["nll_after_deep"][k] == pytest.approx(
            (deep[:, :, j] @ tokens).mean() / 16.0, abs=1e-15
        )
    expected = two_way_bootstrap(x.mean(axis=2), 0.9, 500, 3, tokens)
    assert summary["depth_average"]["high"] == expected.high
    assert summary["bands"]["1..2"]["high"] == expected.high
