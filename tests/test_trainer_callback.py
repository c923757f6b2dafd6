"""Fixed-first through the Hugging Face Trainer (`FixedFirstCallback`) on a tiny
Inkling2LoopForCausalLM: the passes every forward ran are the plan's, step by step, with the
micro-batches of a step sharing its depth; depth and phase are logged; a Trainer resumed from a
checkpoint continues the schedule, auto switch included, as the uninterrupted run does."""

from __future__ import annotations

import json
import os

import pytest
import torch

from fixedfirst.compute.flops import FlopModel
from fixedfirst.compute.measured import measure_flops
from fixedfirst.compute.plan import plan_schedule
from fixedfirst.config import ScheduleConfig, SwitchConfig
from fixedfirst.errors import UserError
from tests.inkling_helpers import PassCounter, batches, needs_inkling, tiny_inkling

pytestmark = needs_inkling
os.environ.setdefault("HF_HUB_OFFLINE", "1")

STEPS = 20
ACCUMULATION = 2
AUTO = ScheduleConfig(kind="fixed-first", k0=1, switch="auto", k_min=1, k_max=4)
LINEAR = FlopModel(prelude=10.0, iteration=5.0, readout=20.0)
EAGER = SwitchConfig(rule="plateau", floor=0.5, ceiling=0.9, window=0.3, every=1, threshold=1e9)
"""A rule that fires at its first check with five losses in its window (6 steps): at the floor
(step 10) when the losses of steps 5..10 are there, later when a resume has lost those before
it."""


def cost_of(model):
    x = batches(4, 16, 99)
    return measure_flops(model, lambda: model(input_ids=x, labels=x).loss, tokens=x.numel())


def train(tmp_path, plan, resume: str | None = None, max_steps: int = STEPS, logging_steps=1):
    """Train a fresh tiny model under `plan` for `max_steps` (checkpoints every 4 steps); the
    passes of each forward, the callback and the Trainer."""
    from transformers import Trainer, TrainingArguments

    from fixedfirst.scheduling.hf_trainer import FixedFirstCallback

    model = tiny_inkling()
    counter = PassCounter().attach(model)
    rows = [{"input_ids": r, "labels": r} for r in batches(STEPS * 4, 16, 1)]
    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=max_steps,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=ACCUMULATION,
        logging_steps=logging_steps,
        save_steps=4,
        learning_rate=3e-3,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    callback = FixedFirstCallback(plan)
    trainer = Trainer(model=model, args=args, train_dataset=rows, callbacks=[callback])
    trainer.train(resume_from_checkpoint=resume)
    return counter.passes, callback, trainer


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    plan = plan_schedule(AUTO, cost_of(tiny_inkling()), 64, steps=STEPS, switch=EAGER)
    directory = tmp_path_factory.mktemp("trainer")
    return plan, directory, *train(directory, plan)


def test_every_forward_runs_the_plans_depth_and_a_steps_micro_batches_share_it(uninterrupted):
    _, _, passes, callback, trainer = uninterrupted
    decided = callback.scheduler.plan
    assert decided.switch_step == 10  # the floor: the rule fired at its first check
    expected = [decided.at(s).depth for s in range(STEPS) for _ in range(ACCUMULATION)]
    assert passes == expected
    assert set(passes[:20]) == {1} and len(set(passes[20:])) > 1
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert [(h["step"], h["depth"], h["phase"]) for h in logged] == [
        (s + 1, decided.at(s).depth, decided.at(s).phase) for s in range(STEPS)
    ]


def test_a_resumed_trainer_continues_the_schedule_and_the_switch(uninterrupted, tmp_path):
    plan, directory, passes, callback, _ = uninterrupted
    checkpoint = directory / "checkpoint-8"  # before the floor: the window's losses of 3..8
    saved = json.loads((checkpoint / "trainer_state.json").read_text())
    observed = saved["stateful_callbacks"]["fixedfirst"]["switch"]["observations"]
    assert [step for step, _ in observed] == [3, 4, 5, 6, 7, 8]
    resumed_passes, resumed, _ = train(tmp_path, plan, resume=str(checkpoint))
    assert resumed.scheduler.switch_step == callback.scheduler.switch_step == 10
    assert resumed_passes == passes[8 * ACCUMULATION :]


def test_a_plan_of_another_length_than_the_trainers_is_refused(tmp_path):
    plan = plan_schedule(AUTO, LINEAR, 64, steps=STEPS + 1, switch=EAGER)
    with pytest.raises(UserError, match=r"runs 20 optimizer steps but the plan has 21"):
        train(tmp_path, plan)


def test_the_callback_needs_the_trainers_model_to_have_a_depth(tmp_path):
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from fixedfirst.scheduling.hf_trainer import FixedFirstCallback

    plan = plan_schedule(AUTO, LINEAR, 64, steps=5, switch_step=2)
    state = TrainerState(max_steps=5)
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    callback = FixedFirstCallback(plan)
    with pytest.raises(UserError, match="no depth handle for Linear"):
        callback.on_train_begin(args, state, TrainerControl(), model=torch.nn.Linear(2, 2))


@pytest.mark.parametrize("logging_steps", [500, 2])
def test_a_log_too_sparse_for_the_switch_window_is_refused(tmp_path, logging_steps):
    """At the Trainer's default (500) the rule never sees five losses in its window and the run
    silently switched at the ceiling; our trainer refuses so, and now the callback does."""
    plan = plan_schedule(AUTO, LINEAR, 64, steps=STEPS, switch=EAGER)
    with pytest.raises(UserError) as caught:
        train(tmp_path, plan, logging_steps=logging_steps)
    message = str(caught.value)
    assert "switch.window = 0.3 of 20 steps holds" in message and "\n" not in message
    assert "lower TrainingArguments(logging_steps=...) to at most 1" in message


def test_the_model_given_where_the_handle_goes_is_refused():
    from fixedfirst.scheduling.hf_trainer import FixedFirstCallback

    plan = plan_schedule(AUTO, LINEAR, 64, steps=5, switch_step=2)
    with pytest.raises(UserError, match="is the model Linear, not a depth handle: wrap it"):
        FixedFirstCallback(plan, torch.nn.Linear(2, 2))  # type: ignore[arg-type]


def test_a_trainer_resumed_without_the_switchs_state_is_refused(uninterrupted, tmp_path):
    """A checkpoint whose trainer_state.json lost the callback's entry (or a loop restarted
    without it) would switch a second time; the first step of the resumed run says so."""
    import shutil

    plan, directory, *_ = uninterrupted
    checkpoint = tmp_path / "checkpoint-12"  # after the switch at 10
    shutil.copytree(directory / "checkpoint-12", checkpoint)
    saved = json.loads((checkpoint / "trainer_state.json").read_text())
    del saved["stateful_callbacks"]["fixedfirst"]
    (checkpoint / "trainer_state.json").write_text(json.dumps(saved))
    with pytest.raises(UserError, match="starts at step 12, but its auto switch decides"):
        train(tmp_path / "out", plan, resume=str(checkpoint))
