"""The trainer: exact resume, budgets, depth sequence, learning rates, refusals."""

from __future__ import annotations

import itertools
import json
import math

import pytest
import torch

from fixedfirst.cli.main import main
from fixedfirst.compute import flop_model, plan_budget
from fixedfirst.config import TrainConfig
from fixedfirst.errors import UserError
from fixedfirst.schedules import Schedule
from fixedfirst.train.checkpoint import CheckpointManager
from fixedfirst.train.divergence import TrainingDiverged
from fixedfirst.train.optim import lr_at
from fixedfirst.train.trainer import Trainer
from tests.trainer_helpers import comparable, final_weights, tiny_config, train_records


def test_resume_is_exact(tmp_path):
    config = tiny_config()
    Trainer(config, tmp_path / "straight", quiet=True).train()
    Trainer(config, tmp_path / "paused", quiet=True).train(stop_after=5)
    assert len(train_records(tmp_path / "paused")) == 5
    Trainer(config, tmp_path / "paused", resume=True, quiet=True).train()
    a, b = final_weights(tmp_path / "straight"), final_weights(tmp_path / "paused")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert comparable(train_records(tmp_path / "straight")) == comparable(
        train_records(tmp_path / "paused")
    )


def test_depths_in_metrics_follow_the_schedule(tmp_path):
    config = tiny_config("schedule.kind=uniform")
    Trainer(config, tmp_path / "run", quiet=True).train()
    total = plan_budget(config).total_steps
    expected = Schedule(config.schedule, config.train.seed).depths(total)
    assert [r["depth"] for r in train_records(tmp_path / "run")] == expected


def test_fixed_first_phases_and_switch_checkpoint(tmp_path):
    config = tiny_config()
    summary = Trainer(config, tmp_path / "run", quiet=True).train()
    total = plan_budget(config).total_steps
    switch = math.ceil(0.5 * total)
    records = train_records(tmp_path / "run")
    assert [r["phase"] for r in records] == ["fixed"] * switch + ["finish"] * (total - switch)
    assert all(r["depth"] == 2 for r in records[:switch])
    ckpt = CheckpointManager(tmp_path / "run" / "checkpoints").with_tag("switch")
    assert ckpt is not None and ckpt.step == switch
    assert summary["phases"]["fixed"]["steps"] == switch


def test_switch_step_is_exact_at_a_fractional_boundary(tmp_path):
    """15 steps at switch 0.67: 0.67 * 15 = 10.05, so steps 0..10 (11 of them) train at K0
    and step 11 is the first finishing step. The switch checkpoint is written after step 11."""
    config = tiny_config("train.tokens=1920", "schedule.switch=0.67")  # 15 steps of 8 x 16
    summary = Trainer(config, tmp_path / "run", quiet=True).train()
    assert summary["total_steps"] == 15
    records = train_records(tmp_path / "run")
    assert [r["phase"] for r in records].index("finish") == 11
    assert summary["phases"]["fixed"]["steps"] == 11
    assert summary["phases"]["finish"]["steps"] == 4
    assert CheckpointManager(tmp_path / "run" / "checkpoints").with_tag("switch").step == 11


def test_token_budget_stops_where_it_should(tmp_path):
    config = tiny_config("train.tokens=2000")  # 15 whole steps of 8 x 16 tokens
    summary = Trainer(config, tmp_path / "run", quiet=True).train()
    assert summary["steps"] == 2000 // 128
    assert summary["tokens"] == 15 * 128
    assert train_records(tmp_path / "run")[-1]["tokens"] == 15 * 128


def test_flop_budget_matches_compute(tmp_path):
    budget = 4e9
    runs = {}
    for kind in ("uniform", "fixed-first"):
        config = tiny_config(f"schedule.kind={kind}", f"train.flops={budget}")
        runs[kind] = Trainer(config, tmp_path / kind, quiet=True).train()
        plan = plan_budget(config)
        assert runs[kind]["steps"] == plan.total_steps
        assert plan.flops <= budget
    # The trainer's FLOP count ends where the plan said: below the budget by less than a step.
    for kind, summary in runs.items():
        config = tiny_config(f"schedule.kind={kind}", f"train.flops={budget}")
        plan = plan_budget(config)
        assert summary["flops"] == pytest.approx(plan.flops, rel=1e-9)
        assert summary["flops"] <= budget
        fm = flop_model(config.model, config.train.seq_len)
        one_step = config.train.tokens_per_step * fm.train(config.schedule.k_max)
        assert budget - summary["flops"] < one_step
        assert summary["flop_budget"] == budget
    assert runs["fixed-first"]["tokens"] > runs["uniform"]["tokens"]


def test_evaluation_records_and_summary(tmp_path):
    config = tiny_config("eval.every=6")
    Trainer(config, tmp_path / "run", quiet=True).train()
    from fixedfirst.train.metrics import read_metrics

    evals = read_metrics(tmp_path / "run" / "metrics.jsonl", "eval")
    total = plan_budget(config).total_steps
    assert [e["step"] for e in evals] == [s for s in range(6, total + 1, 6)] + (
        [total] if total % 6 else []
    )
    assert set(evals[-1]["nll_by_depth"]) == {"1", "2", "4"}
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] == total
    record = train_records(tmp_path / "run")[-1]
    for key in ("step", "tokens", "depth", "phase", "loss", "lr", "grad_norm", "flops"):
        assert key in record
    assert record["tok_per_s"] > 0 and record["mfu"] > 0


@pytest.mark.parametrize("schedule", ["cosine", "wsd"])
def test_learning_rate_at_boundaries(schedule):
    config = TrainConfig(lr=1.0, final_lr_fraction=0.1, warmup=0.1, decay=0.2, lr_schedule=schedule)
    total = 100
    lrs = [lr_at(s, total, config) for s in range(total)]
    assert lrs[0] == pytest.approx(0.1)  # (0 + 1) / 10 warmup steps
    assert lrs[9] == pytest.approx(1.0)  # warmup ends at the peak
    assert lrs[-1] == pytest.approx(0.1)  # the last step reaches the final value
    assert max(lrs) == pytest.approx(1.0)
    if schedule == "wsd":
        assert lrs[10:80] == [1.0] * 70  # stable until the last 20%
        assert lrs[80] < 1.0
    else:
        assert all(a >= b for a, b in itertools.pairwise(lrs[10:]))  # monotone decay


def test_checkpoints_retention_keeps_tagged_ones(tmp_path):
    config = tiny_config("train.snapshots=[0.3]")
    Trainer(config, tmp_path / "run", quiet=True).train()
    ckpts = CheckpointManager(tmp_path / "run" / "checkpoints").all()
    periodic_only = [c for c in ckpts if c.tags == ["periodic"]]
    assert len(periodic_only) <= 2
    tags = {t for c in ckpts for t in c.tags}
    assert {"switch", "snapshot-0.3", "final"} <= tags
    assert not list((tmp_path / "run" / "checkpoints").glob(".tmp-*"))


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
