"""The trainer with `schedule.switch = "auto"`: the decision is recorded everywhere, the run is the
fixed-switch run at the step it chose, and kill -9 plus --resume switch at the same step."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from fixedfirst.compute.plan import plan_run
from fixedfirst.errors import UserError
from fixedfirst.runs.checkpoint import CheckpointManager
from fixedfirst.schedules import Schedule
from fixedfirst.scheduling.depth_scheduler import DepthScheduler
from fixedfirst.train.auto_switch import checkpoint_schedule, scheduler_state, switch_summary
from fixedfirst.train.counters import format_summary
from fixedfirst.train.metrics import read_metrics
from fixedfirst.train.trainer import Trainer
from tests.test_crash import resume_here, wait_for
from tests.trainer_helpers import (
    comparable,
    final_weights,
    tiny_config,
    train_records,
    write_tiny_config,
)

ROOT = Path(__file__).resolve().parents[1]
AUTO = ("schedule.switch=auto", "switch.every=2", "switch.window=0.3", "train.tokens=8192")
"""64 steps of the tiny model; the floor is step 32, the ceiling step 58."""
RULES = {  # thresholds at which both fire between floor and ceiling (plateau at 34, depth-gap 42)
    "plateau": ("switch.rule=plateau", "switch.threshold=2.0"),
    "depth-gap": ("switch.rule=depth-gap", "switch.threshold=0.005"),
}


EARLIER = Path(__file__).parent / "fixtures" / "auto-switch-earlier"
"""Checkpoints' meta.json as the trainer wrote them before it followed DepthScheduler."""


def switch_records(run: Path) -> list[dict]:
    return [r for r in read_metrics(run / "metrics.jsonl") if r["kind"].startswith("switch")]


@dataclass(frozen=True)
class AutoRun:
    path: Path
    summary: dict


def train_auto(directory: Path, rule: str) -> AutoRun:
    summary = Trainer(tiny_config(*AUTO, *RULES[rule]), directory, quiet=True).train()
    return AutoRun(directory, summary)


@pytest.fixture(scope="module")
def depth_gap_run(tmp_path_factory) -> AutoRun:
    """The depth-gap run trained once, uninterrupted: the reference of the resume and kill
    tests below. Read-only."""
    return train_auto(tmp_path_factory.mktemp("auto") / "depth-gap", "depth-gap")


@pytest.mark.parametrize("rule", RULES)
def test_an_auto_run_is_the_fixed_run_at_the_step_it_chose(tmp_path, rule, request):
    auto = (
        request.getfixturevalue("depth_gap_run")
        if rule == "depth-gap"
        else train_auto(tmp_path / "auto", rule)
    )
    summary = auto.summary
    switch = summary["switch"]
    total = summary["total_steps"]
    assert switch["auto"] and switch["rule"] == rule and switch["reason"] == "rule"
    assert switch["floor_step"] <= switch["step"] < switch["ceiling_step"]
    step = switch["step"]
    # Recorded: one `switch` line, the tagged checkpoint, the phases.
    decided = [r for r in switch_records(auto.path) if r["kind"] == "switch"]
    assert [(r["step"], r["reason"], r["rule"]) for r in decided] == [(step, "rule", rule)]
    ckpt = CheckpointManager(auto.path / "checkpoints").with_tag("switch")
    assert ckpt.step == step and f"auto-{rule}" in ckpt.tags
    assert ckpt.meta["depth_scheduler"]["switch"]["decision"]["step"] == step
    assert summary["phases"]["fixed"]["steps"] == step
    assert f"auto switch ({rule}) at step {step} (" in format_summary(summary)
    if rule == "depth-gap":
        probes = [r for r in switch_records(auto.path) if r["kind"] == "switch_probe"]
        assert probes and all(r["step"] <= step for r in probes)
        assert switch["probe_flops"] == pytest.approx(probes[-1]["probe_flops"])
        assert switch["probe_flops"] > 0
    # The fixed switch at the same step trains the same depths and weights, bit for bit:
    # deciding (and probing) changes nothing but where the schedule switches.
    fixed = tiny_config(*AUTO[1:], f"schedule.switch={step / total!r}")
    Trainer(fixed, tmp_path / "fixed", quiet=True).train()
    assert comparable(train_records(auto.path)) == comparable(train_records(tmp_path / "fixed"))
    a, b = final_weights(auto.path), final_weights(tmp_path / "fixed")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_resume_between_checks_switches_at_the_same_step(tmp_path, depth_gap_run):
    config = tiny_config(*AUTO, *RULES["depth-gap"])
    Trainer(config, tmp_path / "paused", quiet=True).train(stop_after=51)  # after the floor
    Trainer(config, tmp_path / "paused", resume=True, quiet=True).train()
    straight = depth_gap_run.path
    assert switch_records(tmp_path / "paused") == switch_records(straight)
    assert comparable(train_records(tmp_path / "paused")) == comparable(train_records(straight))


def in_earlier_form(meta: dict) -> dict:
    """`meta` as the trainer wrote it before it followed DepthScheduler: the switch's state under
    `auto_switch`, as the policy's state and the probe count (the fixtures in EARLIER)."""
    state = meta.pop("depth_scheduler")
    return {**meta, "auto_switch": {"policy": state["switch"], "probes": state["probes"]}}


def test_a_run_checkpointed_in_the_earlier_form_resumes_exactly(tmp_path, depth_gap_run):
    """Paused at step 36 (after a check of the rule, before the switch at 42) with its
    checkpoints rewritten to the earlier form, the run resumes into the uninterrupted one: the
    same probes, checks, switch step and weights, bit for bit; later checkpoints take the new
    form."""
    config = tiny_config(*AUTO, *RULES["depth-gap"])
    run = tmp_path / "earlier"
    Trainer(config, run, quiet=True).train(stop_after=36)
    for path in (run / "checkpoints").glob("step-*/meta.json"):
        path.write_text(json.dumps(in_earlier_form(json.loads(path.read_text()))))
    ours = CheckpointManager(run / "checkpoints").at_step(36).meta
    real = json.loads((EARLIER / "depth-gap-step-36.json").read_text())
    assert ours.keys() == real.keys() and ours["tags"] == real["tags"]
    mine, theirs = ours["auto_switch"], real["auto_switch"]
    assert mine.keys() == theirs.keys() and mine["policy"].keys() == theirs["policy"].keys()
    assert mine["probes"] == theirs["probes"] == 12 and mine["policy"]["decision"] is None
    steps = [[s for s, _ in form["policy"]["observations"]] for form in (mine, theirs)]
    assert steps[0] == steps[1]
    Trainer(config, run, resume=True, quiet=True).train()
    straight = depth_gap_run.path
    assert switch_records(run) == switch_records(straight)
    assert comparable(train_records(run)) == comparable(train_records(straight))
    a, b = final_weights(run), final_weights(straight)
    assert all(torch.equal(a[k], b[k]) for k in a)
    newest = CheckpointManager(run / "checkpoints").all()[-1].meta
    assert "auto_switch" not in newest and newest["depth_scheduler"]["probes"] > 12


def test_a_checkpoint_without_the_switchs_state_is_one_line(tmp_path):
    """meta.json with neither form of the scheduler's state, in an auto run: a KeyError before."""
    config = tiny_config(*AUTO, *RULES["plateau"])
    run = tmp_path / "lost"
    Trainer(config, run, quiet=True).train(stop_after=8)
    for path in (run / "checkpoints").glob("step-*/meta.json"):
        meta = json.loads(path.read_text())
        del meta["depth_scheduler"]
        path.write_text(json.dumps(meta))
    with pytest.raises(UserError) as caught:
        Trainer(config, run, resume=True, quiet=True).train()
    message = str(caught.value)
    assert "meta.json holds no auto switch state (neither 'depth_scheduler' nor" in message
    assert "\n" not in message


def test_the_earlier_form_reads_as_the_schedulers_state():
    """The real checkpoints of EARLIER: the switch decided at 34 (plateau) and 12 probes made
    without a decision (depth-gap), for a resume and for the diagnostic's schedule."""
    for rule, step, probes, switched in (("plateau", 34, 0, 34), ("depth-gap", 36, 12, None)):
        meta = json.loads((EARLIER / f"{rule}-step-{step}.json").read_text())
        config = tiny_config(*AUTO, *RULES[rule])
        scheduler = DepthScheduler(plan_run(config))
        scheduler.load_state_dict(scheduler_state(meta))
        assert (scheduler.switch_step, scheduler.probes) == (switched, probes)
        assert checkpoint_schedule(config, meta).decided_switch_step == switched


# Runs the CLI with every training step slowed down, so that a kill lands mid-run.
SLOW_STEPS = """
import sys, time
import fixedfirst.train.trainer as trainer
original = trainer.train_step
def slow(*args, **kwargs):
    time.sleep(0.03)
    return original(*args, **kwargs)
trainer.train_step = slow
from fixedfirst.cli.main import main
main(sys.argv[1:])
"""


def test_kill_9_and_resume_switch_at_the_same_step(tmp_path, depth_gap_run):
    """Killed after a checkpoint between the floor and the switch: the resumed run continues
    from the checkpointed losses and switches where the uninterrupted one did."""
    overrides = [*AUTO, *RULES["depth-gap"]]
    reference = depth_gap_run.path
    assert depth_gap_run.summary["switch"]["step"] > 36, "the kill must land before the switch"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + str(ROOT)}
    run = tmp_path / "killed"
    args = ["train", str(write_tiny_config(tmp_path)), "--out", str(run), "--quiet"]
    args += [f"--set={o}" for o in overrides]
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_STEPS, *args], env=env, stderr=subprocess.PIPE
    )
    wait_for(lambda: (run / "checkpoints" / "step-0000036" / "meta.json").exists(), proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (run / "summary.json").exists()
    assert not [r for r in switch_records(run) if r["kind"] == "switch"]  # killed before it
    resume_here(run)
    assert switch_records(run) == switch_records(reference)
    a, b = final_weights(run), final_weights(reference)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_flop_budget_fits_wherever_the_rule_switches():
    config = tiny_config(*AUTO[:3], "train.flops=2e9", "train.tokens=1000")
    budget = plan_run(config)
    from fixedfirst.compute.flops import flop_model, train_flops
    from fixedfirst.switching.policy import switch_bounds

    t = config.train
    fm = flop_model(config.model, t.seq_len)
    schedule = Schedule(config.schedule, t.seed)
    floor, ceiling = switch_bounds(config.switch, budget.total_steps)
    costs = [
        train_flops(
            fm, schedule.with_switch_step(s).histogram(budget.total_steps), t.tokens_per_step
        )
        for s in range(floor, ceiling + 1)
    ]
    assert max(costs) == pytest.approx(budget.flops) and budget.flops <= 2e9
    longer = plan_run(config).total_steps + 1
    floor, _ = switch_bounds(config.switch, longer)
    at_floor = schedule.with_switch_step(floor).histogram(longer)
    assert train_flops(fm, at_floor, t.tokens_per_step) > 2e9


def test_switch_records_reach_tensorboard_and_wandb_as_scalars():
    from fixedfirst.train.scalars import scalars

    probe = {"kind": "switch_probe", "step": 40, "gain": -0.02}
    fitted = {"kind": "switch_check", "step": 50, "decrease": 0.4, "bound": 0.5}
    unfitted = {"kind": "switch_check", "step": 50, "decrease": None, "bound": None}
    assert scalars(probe) == {"switch/gain": -0.02}
    assert scalars(fitted) == {"switch/decrease": 0.4, "switch/bound": 0.5}
    assert scalars(unfitted) == {} and scalars({"kind": "switch", "step": 50}) == {}


@pytest.mark.parametrize("lr_schedule", ["cosine", "wsd"])
def test_the_summary_gives_the_learning_rate_at_the_switch_and_over_the_finish(lr_schedule):
    """40 steps, 4 of warmup, switch at 0.5 (step 20), peak 3e-3, final 10% of it. By hand:
    cosine at step s >= 4 is 3e-4 + 2.7e-3 * (1 + cos(pi * (s - 4) / 35)) / 2; warmup-stable-decay
    with decay 0.2 is 3e-3 until step 32, then falls by 2.7e-3 / 8 a step (step 39: 3e-4)."""
    config = tiny_config(f"train.lr_schedule={lr_schedule}", "train.lr=3e-3", "train.warmup=0.1")
    config.train.final_lr_fraction = 0.1
    plan = plan_run(config, 40)

    def by_hand(s: int) -> float:
        if lr_schedule == "cosine":
            return 3e-4 + 2.7e-3 * (1 + math.cos(math.pi * (s - 4) / 35)) / 2
        return 3e-3 if s < 32 else 3e-3 - 2.7e-3 * (s - 31) / 8

    switch = switch_summary(DepthScheduler(plan), None, config.train)
    assert switch["step"] == 20 and switch["peak_lr"] == 3e-3
    assert switch["lr"] == pytest.approx(by_hand(20), rel=1e-12)
    expected_mean = sum(by_hand(s) for s in range(20, 40)) / 20
    assert switch["mean_finish_lr"] == pytest.approx(expected_mean, rel=1e-12)
    assert by_hand(39) == pytest.approx(3e-4)
