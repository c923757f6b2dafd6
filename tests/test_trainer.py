"""The trainer: exact resume, budgets, the depths the model ran, learning rates, checkpoints,
refusals."""

from __future__ import annotations

import itertools
import json

import pytest
import torch

from fixedfirst.cli.main import main
from fixedfirst.compute.flops import flop_model
from fixedfirst.compute.plan import plan_run
from fixedfirst.config import TrainConfig
from fixedfirst.errors import UserError
from fixedfirst.runs.checkpoint import CheckpointManager
from fixedfirst.train.optim import lr_at
from fixedfirst.train.trainer import Trainer, TrainingDiverged
from tests.trainer_helpers import (
    comparable,
    final_weights,
    fixed_first_uniform_depths,
    observe_training,
    tiny_config,
    train_records,
)


def test_resume_is_exact(tmp_path, tiny_run):
    config = tiny_config()
    Trainer(config, tmp_path / "paused", quiet=True).train(stop_after=5)
    assert len(train_records(tmp_path / "paused")) == 5
    Trainer(config, tmp_path / "paused", resume=True, quiet=True).train()
    a, b = final_weights(tiny_run.path), final_weights(tmp_path / "paused")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert comparable(train_records(tiny_run.path)) == comparable(
        train_records(tmp_path / "paused")
    )


def test_the_model_runs_the_depths_the_schedule_documents(tiny_run):
    """The depth each step ran at, counted in the model (core calls per optimizer step), equals
    the documented rule written out independently of Schedule; the logs say the same."""
    t, s = tiny_run.config.train, tiny_run.config.schedule
    total = t.tokens // t.tokens_per_step
    expected = fixed_first_uniform_depths(t.seed, s.k0, s.switch, s.k_max, total)
    assert tiny_run.depths_run == expected
    assert [r["depth"] for r in train_records(tiny_run.path)] == expected
    assert len(set(expected)) > 3  # the finish really draws several depths


def test_fixed_first_phases_and_switch_checkpoint(tiny_run):
    total = 48  # 6144 tokens of 8 x 16
    switch = 24  # 0.5 x 48
    records = train_records(tiny_run.path)
    assert [r["phase"] for r in records] == ["fixed"] * switch + ["finish"] * (total - switch)
    ckpt = CheckpointManager(tiny_run.path / "checkpoints").with_tag("switch")
    assert ckpt is not None and ckpt.step == switch
    assert tiny_run.summary["phases"]["fixed"]["steps"] == switch
    assert tiny_run.summary["phases"]["finish"]["steps"] == total - switch


def test_the_optimizer_steps_at_the_closed_form_learning_rates(tiny_run):
    """lr 3e-3, 5 warmup steps (round(0.1 x 48)), then cosine to 3e-4 over the 42 steps after
    the warmup's end: cos(pi/3) = 1/2, cos(pi/2) = 0, cos(2 pi/3) = -1/2 at steps 19, 26, 33."""
    lrs = tiny_run.lrs
    assert len(lrs) == 48
    closed_form = {0: 6e-4, 1: 1.2e-3, 4: 3e-3, 5: 3e-3, 19: 2.325e-3, 26: 1.65e-3, 33: 9.75e-4}
    closed_form[47] = 3e-4
    for step, lr in closed_form.items():
        assert lrs[step] == pytest.approx(lr, rel=1e-12), step
    assert [r["lr"] for r in train_records(tiny_run.path)] == lrs


def test_checkpoints_are_written_where_they_should_be(tiny_run):
    """Every 4 steps (checkpoint_every), the switch at 24 and the end at 48; with
    keep_checkpoints = 100 all of them stay (retention: the next test)."""
    expected = [(s, ["periodic"]) for s in range(4, 49, 4)]
    expected[5] = (24, ["periodic", "switch"])
    expected[-1] = (48, ["final", "periodic"])
    assert tiny_run.saves == expected
    kept = CheckpointManager(tiny_run.path / "checkpoints").all()
    assert [(c.step, c.tags) for c in kept] == expected
    assert not list((tiny_run.path / "checkpoints").glob(".tmp-*"))


def test_switch_and_token_budget_at_a_fractional_boundary(tmp_path):
    """2000 tokens make 15 whole steps of 8 x 16. At switch 0.67, 0.67 x 15 = 10.05, so steps
    0..10 (11 of them) train at K0 and step 11 is the first finishing step; the switch
    checkpoint is written after step 11."""
    config = tiny_config("train.tokens=2000", "schedule.switch=0.67")
    summary = Trainer(config, tmp_path / "run", quiet=True).train()
    assert summary["total_steps"] == summary["steps"] == 15
    assert summary["tokens"] == 15 * 128
    records = train_records(tmp_path / "run")
    assert records[-1]["tokens"] == 15 * 128
    assert [r["phase"] for r in records].index("finish") == 11
    assert summary["phases"]["fixed"]["steps"] == 11
    assert summary["phases"]["finish"]["steps"] == 4
    assert CheckpointManager(tmp_path / "run" / "checkpoints").with_tag("switch").step == 11


def test_flop_budget_matches_compute(tmp_path):
    budget = 4e9
    runs = {}
    for kind in ("uniform", "fixed-first"):
        config = tiny_config(f"schedule.kind={kind}", f"train.flops={budget}")
        runs[kind] = Trainer(config, tmp_path / kind, quiet=True).train()
        plan = plan_run(config)
        assert runs[kind]["steps"] == plan.total_steps
        assert plan.flops <= budget
    # The trainer's FLOP count ends where the plan said: below the budget by less than a step.
    for kind, summary in runs.items():
        config = tiny_config(f"schedule.kind={kind}", f"train.flops={budget}")
        plan = plan_run(config)
        assert summary["flops"] == pytest.approx(plan.flops, rel=1e-9)
        assert summary["flops"] <= budget
        fm = flop_model(config.model, config.train.seq_len)
        one_step = config.train.tokens_per_step * fm.train(config.schedule.k_max)
        assert budget - summary["flops"] < one_step
        assert summary["flop_budget"] == budget
    assert runs["fixed-first"]["tokens"] > runs["uniform"]["tokens"]


def test_evaluations_snapshots_and_truncated_backprop(tmp_path):
    """Evaluation every 6 steps leaves the model training at the scheduled depths; the FLOP
    count follows the depths run with truncated backprop; the 0.3 snapshot is the first step
    whose cumulative FLOPs reach 0.3 of the run's; keep_checkpoints = 2 keeps the two newest
    periodic-only checkpoints and every tagged one."""
    config = tiny_config("eval.every=6", "train.grad_depth=2", "train.snapshots=[0.3]")
    run = observe_training(config, tmp_path / "run")
    from fixedfirst.train.metrics import read_metrics

    total = 48
    evals = read_metrics(run.path / "metrics.jsonl", "eval")
    assert [e["step"] for e in evals] == list(range(6, total + 1, 6))
    assert set(evals[-1]["nll_by_depth"]) == {"1", "2", "4"}
    s = config.schedule
    assert run.depths_run == fixed_first_uniform_depths(0, s.k0, s.switch, s.k_max, total)
    fm = flop_model(config.model, config.train.seq_len)
    per_step = [config.train.tokens_per_step * fm.train(k, 2) for k in run.depths_run]
    cumulative = list(itertools.accumulate(per_step))
    assert run.summary["flops"] == pytest.approx(cumulative[-1], rel=1e-12)
    assert run.summary["flops"] < sum(
        config.train.tokens_per_step * fm.train(k) for k in run.depths_run
    )
    snapshot = next(i + 1 for i, c in enumerate(cumulative) if c >= 0.3 * cumulative[-1])
    saves = dict(run.saves)
    assert [step for step, tags in run.saves if "snapshot-0.3" in tags] == [snapshot]
    assert saves[24] == ["periodic", "switch"] and saves[48] == ["final", "periodic"]
    kept = {c.step for c in CheckpointManager(run.path / "checkpoints").all()}
    assert kept == {snapshot, 24, 40, 44, 48}
    summary = json.loads((run.path / "summary.json").read_text())
    assert summary["steps"] == total
    record = train_records(run.path)[-1]
    for key in ("step", "tokens", "depth", "phase", "loss", "lr", "grad_norm", "flops"):
        assert key in record
    assert record["tok_per_s"] > 0 and record["mfu"] > 0


def test_learning_rate_at_closed_form_points():
    """Cosine, no warmup, 61 steps: cos(pi/3), cos(pi/2), cos(2 pi/3) at steps 20, 30, 40 give
    0.1 + 0.9 x (0.75, 0.5, 0.25); a linear decay would give 0.7, 0.55, 0.4. Warmup-stable-
    decay over the last 20 of 100 steps falls by 0.045 per step from step 80."""
    cosine = TrainConfig(lr=1.0, final_lr_fraction=0.1, warmup=0.0, lr_schedule="cosine")
    at = {0: 1.0, 20: 0.775, 30: 0.55, 40: 0.325, 60: 0.1}
    for step, lr in at.items():
        assert lr_at(step, 61, cosine) == pytest.approx(lr, rel=1e-12), step
    warm = TrainConfig(lr=1.0, final_lr_fraction=0.1, warmup=0.1, lr_schedule="cosine")
    assert [lr_at(s, 100, warm) for s in (0, 4, 9)] == pytest.approx([0.1, 0.5, 1.0], rel=1e-12)
    wsd = TrainConfig(lr=1.0, final_lr_fraction=0.1, warmup=0.1, decay=0.2, lr_schedule="wsd")
    at = {0: 0.1, 9: 1.0, 10: 1.0, 79: 1.0, 80: 0.955, 89: 0.55, 99: 0.1}
    for step, lr in at.items():
        assert lr_at(step, 100, wsd) == pytest.approx(lr, rel=1e-12), step


def test_non_finite_loss_stops_with_step_and_depth(tmp_path, monkeypatch):
    import fixedfirst.train.step as step_module

    config = tiny_config()
    trainer = Trainer(config, tmp_path / "run", quiet=True)
    original = step_module.next_token_loss
    calls = {"n": 0}

    def poisoned(logits, targets, **kwargs):
        calls["n"] += 1
        loss = original(logits, targets, **kwargs)
        return loss * float("nan") if calls["n"] > 2 * 6 else loss  # step 7 (2 micro-batches)

    monkeypatch.setattr(step_module, "next_token_loss", poisoned)
    with pytest.raises(TrainingDiverged, match=r"at step 7 \(depth 2\)"):
        trainer.train()
    # The checkpoint taken at step 4 is intact and loadable; nothing from step 7 on was saved.
    ckpts = CheckpointManager(tmp_path / "run" / "checkpoints").all()
    assert [c.step for c in ckpts] == [4]
    ckpts[0].verify()


def test_existing_run_is_refused_without_resume(tmp_path, capsys):
    config_path = tmp_path / "tiny.toml"
    from tests.trainer_helpers import write_tiny_config

    write_tiny_config(tmp_path)
    run = tmp_path / "run"
    Trainer(tiny_config(), run, quiet=True).train(stop_after=2)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    with pytest.raises(SystemExit) as e:
        main(["train", str(config_path), "--out", str(run), "--quiet"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "already holds a run; pass --resume" in err and err.count("\n") == 1
    assert before == {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}


def test_resume_with_changed_run_definition_names_the_keys(tmp_path, capsys):
    from tests.trainer_helpers import write_tiny_config

    config_path = write_tiny_config(tmp_path)
    run = tmp_path / "run"
    Trainer(tiny_config(), run, quiet=True).train(stop_after=2)
    with pytest.raises(SystemExit):
        main(
            [
                "train",
                str(config_path),
                "--out",
                str(run),
                "--resume",
                "--set",
                "model.d_model=64",
                "--set",
                "schedule.k0=3",
            ]
        )
    err = capsys.readouterr().err
    assert "model.d_model (32 in the run, 64 now), schedule.k0 (2 in the run, 3 now)" in err
    # Changing only how often to log is fine.
    main_ok = ["train", "--out", str(run), "--resume", "--quiet", "--set", "train.log_every=3"]
    with pytest.raises(SystemExit) as e:
        main(main_ok)
    assert e.value.code == 0


def test_corrupt_checkpoint_falls_back_then_fails_clearly(tmp_path):
    run = tmp_path / "run"
    config = tiny_config()
    Trainer(config, run, quiet=True).train(stop_after=9)
    manager = CheckpointManager(run / "checkpoints")
    newest = manager.all()[-1]
    data = bytearray((newest.path / "trainer.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (newest.path / "trainer.pt").write_bytes(data)
    messages = []
    assert manager.latest_valid(warn=messages.append).step < newest.step
    assert "trainer.pt is corrupt" in messages[0]
    # A truncated weights file in every checkpoint: no fallback left, a clear error.
    for ckpt in manager.all():
        weights = ckpt.path / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(UserError, match="no loadable checkpoint"):
        Trainer(config, run, resume=True, quiet=True)


def test_checkpoint_of_another_shape_is_refused(tmp_path):
    run = tmp_path / "run"
    Trainer(tiny_config(), run, quiet=True).train(stop_after=4)
    ckpt = CheckpointManager(run / "checkpoints").all()[-1]
    from fixedfirst.model import LoopedTransformer

    other = LoopedTransformer(tiny_config("model.d_model=64").model)
    with pytest.raises(UserError, match="weights do not fit this model"):
        ckpt.load_model(other)


def test_pickled_code_is_never_executed(tmp_path):
    run = tmp_path / "run"
    Trainer(tiny_config(), run, quiet=True).train(stop_after=4)
    ckpt = CheckpointManager(run / "checkpoints").all()[-1]
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    torch.save({"optimizer": Payload()}, ckpt.path / "trainer.pt")
    with pytest.raises(UserError, match="cannot load trainer.pt"):
        ckpt.load_trainer_state()
    assert not marker.exists()
