"""A finishing stage of a run trained at one depth: its learning rate (`train.finishing`) and its
configuration (`fixedfirst branch --finish`, train/finishing_stage.py)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from fixedfirst.cli.main import main
from fixedfirst.config import FinishingLR, LowRankConfig, RunConfig, load_config
from fixedfirst.errors import UserError
from fixedfirst.runs.directory import RunDir
from fixedfirst.schedules import Schedule
from fixedfirst.train.branch import branch_run
from fixedfirst.train.finishing_stage import continued_stage, finishing_stage, lowrank_stage
from fixedfirst.train.optim import lr_at
from tests.inkling_helpers import needs_inkling

FIXED = """
[model]
vocab_size = 13
d_model = 16
n_heads = 2
n_prelude = 1
n_core = 1
n_coda = 1
max_seq_len = 11

[schedule]
kind = "fixed"
depth = 2

[data]
kind = "chains"

[data.chains]
statements = 10
values = 8
max_ops = 4
eval_ops = 8

[train]
tokens = 880
batch_size = 4
seq_len = 11
lr = 0.01
warmup = 0.1
final_lr_fraction = 0.1
log_every = 5

[eval]
depths = [1, 2]
batches = 1
"""


def cli(*args: str) -> int:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    return int(info.value.code or 0)


def train_config(**finishing) -> RunConfig:
    config = RunConfig.from_dict({"train": {"lr": 0.01, "final_lr_fraction": 0.1, "warmup": 0.1}})
    return replace(config, train=replace(config.train, finishing=FinishingLR(**finishing)))


def test_before_the_stage_the_rate_is_the_original_runs_and_after_it_constant_at_its_end():
    config = train_config(start_step=100, lr="constant")
    original = replace(config.train, finishing=None)
    for step in (0, 5, 9, 10, 50, 99):  # warmup, decay: the 100-step run's own curve
        assert lr_at(step, 130, config.train) == lr_at(step, 100, original)
    assert lr_at(99, 100, original) == pytest.approx(0.001)  # the cosine's end: 0.1 of 0.01
    assert [lr_at(s, 130, config.train) for s in (100, 115, 129)] == [0.001] * 3


def test_the_rewarm_climbs_to_its_peak_and_decays_back_to_the_final_rate():
    config = train_config(start_step=100, lr="rewarm", peak=0.5, warmup=0.1)
    rates = [lr_at(s, 200, config.train) for s in range(100, 200)]
    # 10 warmup steps from 0.001 to 0.005, linear; then a cosine over the other 90 to 0.001
    assert rates[0] == pytest.approx(0.001 + 0.004 / 10)
    assert rates[9] == pytest.approx(0.005)
    assert rates[10] == pytest.approx(0.005)
    assert lr_at(100 + 55, 200, config.train) == pytest.approx(
        0.001 + 0.004 * 0.5 * (1 + math.cos(math.pi * (55 - 10) / 89))
    )
    assert rates[-1] == pytest.approx(0.001) and max(rates) == pytest.approx(0.005)


def test_the_finishing_configuration_switches_at_the_steps_the_run_trained():
    config = RunConfig.from_dict({"schedule": {"kind": "fixed", "depth": 4}})
    finished = finishing_stage(config, 433, 0.1, 8, "rewarm")
    total = 433 + 43
    assert finished.train.tokens == total * config.train.tokens_per_step
    assert finished.train.flops is None
    schedule = Schedule(finished.schedule, seed=3)
    assert schedule.switch_step(total) == 433
    assert {schedule.depth(s, total) for s in range(433)} == {4}
    assert {schedule.depth(s, total) for s in range(433, total)} <= set(range(1, 9))
    assert finished.train.finishing == FinishingLR(433, "rewarm", 0.3, 0.1)


def test_branch_finish_goes_on_from_the_end_of_a_fixed_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fixed.toml").write_text(FIXED)
    assert cli("train", "fixed.toml", "--out", "base") == 0
    assert cli("branch", "base", "--out", "finish", "--finish", "0.5", "--finish-k-max", "4") == 0
    saved = RunDir(tmp_path / "finish").saved_config()
    assert saved.schedule.kind == "fixed-first" and saved.schedule.k0 == 2
    assert saved.train.finishing == FinishingLR(20, "constant")
    assert cli("train", "--resume", "--out", "finish") == 0
    lines = [json.loads(x) for x in (tmp_path / "finish/metrics.jsonl").read_text().splitlines()]
    steps = [x for x in lines if "depth" in x]
    assert {x["depth"] for x in steps if x["step"] <= 20} == {2}
    finishing = [x for x in steps if x["step"] > 20]
    assert finishing and all(x["lr"] == pytest.approx(0.001) for x in finishing)
    summary = json.loads((tmp_path / "finish/summary.json").read_text())
    assert summary["steps"] == 30
    assert load_config("fixed.toml").schedule.kind == "fixed"


def test_the_control_trains_on_at_its_own_depth_for_the_finish_s_tokens():
    """The control of a 10% finish: the same 43 steps more, each at the base's depth, at the
    final rate held constant."""
    config = RunConfig.from_dict({"schedule": {"kind": "fixed", "depth": 4}})
    control = continued_stage(config, 433, 0.1)
    finish = finishing_stage(config, 433, 0.1, 8)
    assert control.train.tokens == finish.train.tokens == 476 * config.train.tokens_per_step
    assert control.schedule == config.schedule and control.train.flops is None
    assert control.train.finishing == FinishingLR(433, "constant") == finish.train.finishing
    with pytest.raises(UserError, match="trained at one depth"):
        continued_stage(finish, 476, 0.1)


def test_the_control_goes_on_from_the_end_of_a_fixed_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fixed.toml").write_text(FIXED)
    assert cli("train", "fixed.toml", "--out", "base") == 0
    base = RunDir(tmp_path / "base")
    branch_run(
        base, RunDir(tmp_path / "control"), continued_stage(base.saved_config(), 20, 0.5), None
    )
    assert cli("train", "--resume", "--out", "control") == 0
    lines = [json.loads(x) for x in (tmp_path / "control/metrics.jsonl").read_text().splitlines()]
    steps = [x for x in lines if "depth" in x]
    assert {x["depth"] for x in steps} == {2}
    after = [x for x in steps if x["step"] > 20]
    assert after and all(x["lr"] == pytest.approx(0.001) for x in after)
    assert json.loads((tmp_path / "control/summary.json").read_text())["steps"] == 30


@needs_inkling
def test_the_low_rank_finish_trains_adapters_alone_at_the_final_rate_for_the_finish_s_tokens():
    """A 10% low-rank finish of a base trained 433 steps at K = 4: a run of its own of the 43
    steps a 10% finish adds (not 476: it does not go on from the base's steps), at depths
    uniform in 1..6, at the base's final rate (0.01 x 0.1) from its first step to its last, with
    the adapters it is given."""
    config = RunConfig.from_dict(
        {
            "model": {"kind": "transformers", "architecture": "Inkling2LoopForCausalLM"},
            "schedule": {"kind": "fixed", "depth": 4},
            "train": {"lr": 0.01, "final_lr_fraction": 0.1, "warmup": 0.1},
        }
    )
    adapters = LowRankConfig(rank=4)
    lowrank = lowrank_stage(config, 433, 0.1, 6, adapters)
    assert lowrank.train.tokens == 43 * config.train.tokens_per_step
    assert lowrank.train.flops is None and lowrank.train.finishing is None
    assert lowrank.train.lowrank == adapters and config.train.lowrank is None
    assert (lowrank.schedule.kind, lowrank.schedule.k_min, lowrank.schedule.k_max) == (
        "uniform",
        1,
        6,
    )
    rates = [lr_at(step, 43, lowrank.train) for step in range(43)]
    assert rates == pytest.approx([0.001] * 43)
    assert lowrank.model == config.model
