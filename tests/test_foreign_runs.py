"""fixedfirst's own commands on a looped model nobody here wrote: transformers'
Inkling2LoopForCausalLM named by `[model] kind = "transformers"` (tests/inkling_helpers.py's tiny
one). Fixed-first training checked against the passes each forward ran, exact resume, NLL by
depth against the model's own forward, the measured compute model in `fixedfirst compute`, a
compute-matched sweep arm, and two DDP processes at depths that leave parameters unused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from fixedfirst.cli.main import main
from fixedfirst.compute.run_cost import run_plan
from fixedfirst.config import load_config
from fixedfirst.errors import UserError
from fixedfirst.schedules import Schedule
from fixedfirst.train.trainer import Trainer
from tests.inkling_helpers import INKLING_TOML, TINY, PassCounter, needs_inkling
from tests.trainer_helpers import comparable, final_weights, train_records

pytestmark = needs_inkling

ROOT = Path(__file__).resolve().parents[1]
STEPS = 10
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
"""Two processes against one: only the order in which micro-batch gradients are summed differs
(as tests/test_distributed.py measures for our model)."""


def inkling_config(directory: Path, *overrides: str):
    path = directory / "inkling.toml"
    path.write_text(INKLING_TOML)
    return path, load_config(path, list(overrides))


def run_cli(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err


class StepPasses:
    """The loop passes of every forward the model ran, grouped by the optimizer step they fed:
    counted in the model's first looped layer, not read from the trainer's logs."""

    def __init__(self, trainer: Trainer) -> None:
        self.counter = PassCounter().attach(trainer.model.network)
        self.boundaries: list[int] = []
        trainer.optimizer.register_step_pre_hook(self.step)

    def step(self, optimizer, args, kwargs) -> None:
        self.boundaries.append(len(self.counter.passes))

    @property
    def by_step(self) -> list[list[int]]:
        starts = [0, *self.boundaries[:-1]]
        return [self.counter.passes[a:b] for a, b in zip(starts, self.boundaries, strict=True)]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The run trained straight through, the passes its forwards ran counted."""
    root = tmp_path_factory.mktemp("inkling-run")
    path, config = inkling_config(root)
    trainer = Trainer(config, root / "run", quiet=True)
    passes = StepPasses(trainer)
    summary = trainer.train()
    return {"root": root, "toml": path, "config": config, "summary": summary, "passes": passes}


def test_fixed_first_sets_the_passes_every_forward_runs(straight):
    """Each step's two micro-batches ran the depth the documented schedule gives that step: one
    pass for the first half, then draws of 1..3; the logs say the same."""
    config = straight["config"]
    expected = Schedule(config.schedule, config.train.seed).depths(STEPS)
    assert expected[:5] == [1] * 5 and len(set(expected[5:])) > 1
    assert straight["passes"].by_step == [[depth, depth] for depth in expected]
    run = straight["root"] / "run"
    assert [r["depth"] for r in train_records(run)] == expected
    assert [r["phase"] for r in train_records(run)] == ["fixed"] * 5 + ["finish"] * 5
    assert straight["summary"]["total_steps"] == STEPS


def test_its_config_toml_keeps_the_architectures_whole_configuration(straight):
    """The table is completed with the architecture's defaults (a later transformers release
    cannot change a saved run), the depth key left out; it reads back to the same run."""
    run = straight["root"] / "run"
    saved = load_config(run / "config.toml")
    assert saved == straight["config"]
    options = saved.model.options
    assert options["hidden_size"] == TINY["hidden_size"]
    assert options["final_logit_softcapping"] == 30.0  # a default, written out
    assert "loop_num_passes" not in options
    with pytest.raises(UserError, match=r"model\.transformers\.hidden_size \(32 in the run, 48"):
        Trainer(saved_with(run, "model.transformers.hidden_size=48"), run, resume=True, quiet=True)


def saved_with(run: Path, *overrides: str):
    return load_config(run / "config.toml", list(overrides))


def test_resume_is_exact(straight, tmp_path):
    """Paused after 3 steps (in the fixed stage at one pass, where the message gates have had
    no gradient and so no AdamW state yet) and after 7 (in the finish) and resumed each time:
    the same weights, bit for bit, and the same log as the run straight through."""
    config = straight["config"]
    Trainer(config, tmp_path / "paused", quiet=True).train(stop_after=3)
    Trainer(config, tmp_path / "paused", resume=True, quiet=True).train(stop_after=7)
    assert len(train_records(tmp_path / "paused")) == 7
    Trainer(config, tmp_path / "paused", resume=True, quiet=True).train()
    a, b = final_weights(straight["root"] / "run"), final_weights(tmp_path / "paused")
    assert a.keys() == b.keys() and any("e_score_correction_bias" in k for k in a)  # buffers too
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert comparable(train_records(straight["root"] / "run")) == comparable(
        train_records(tmp_path / "paused")
    )


def test_eval_scores_each_depth_as_the_model_itself_does(straight, capsys, tmp_path):
    """`fixedfirst eval` against an independent reference: transformers' own model with the
    checkpoint's weights, its loop_num_passes set by hand, scored with cross-entropy."""
    from transformers import Inkling2LoopForCausalLM
    from transformers.models.inkling2_loop import Inkling2LoopTextConfig

    from fixedfirst.data.registry import build_source

    run, out = straight["root"] / "run", tmp_path / "eval.json"
    code, printed, _ = run_cli(capsys, "eval", run, "--depths", "1,2,3,5", "--out", out)
    assert code in (0, None) and "| 5 |" in printed
    result = json.loads(out.read_text())
    weights = {k.removeprefix("network."): v for k, v in final_weights(run).items()}
    batch = build_source(straight["config"]).validation_batches(1, 4)[0]
    for depth in (1, 2, 3, 5):
        model = Inkling2LoopForCausalLM(Inkling2LoopTextConfig(**{**TINY, "eos_token_id": 0}))
        model.load_state_dict(weights)
        model.config.loop_num_passes = depth
        with torch.no_grad():
            logits = model.eval()(input_ids=batch.inputs).logits
        nll = F.cross_entropy(logits.flatten(0, 1).float(), batch.targets.flatten()).item()
        assert result["nll_by_depth"][str(depth)] == pytest.approx(nll, rel=1e-6), depth
    assert result["nll_by_depth"]["1"] != result["nll_by_depth"]["3"]  # the passes matter


def test_compute_prints_the_plan_with_the_measured_costs(straight, capsys):
    """The FLOPs per token of a depth that was not measured (4) against torch's own count of
    one training step there, at the training sequence length (the experts computed one by one,
    as matmuls torch's counter sees); the plan's total against the run's FLOP counter."""
    code, printed, _ = run_cli(capsys, "compute", straight["toml"], "--json")
    assert code in (0, None)
    report = json.loads(printed)
    assert report["measured"]["depths"] == [1, 2, 3]
    from fixedfirst.model.transformers_loop import build

    torch.manual_seed(1)
    model = build(straight["config"].model)
    tokens = torch.randint(0, 64, (2, 16))
    model.handle.set_depth(4)
    model.network.set_experts_implementation("eager")
    with FlopCounterMode(display=False) as counted:
        model.network(input_ids=tokens, labels=tokens).loss.backward()
    per_token = counted.get_total_flops() / tokens.numel()
    assert report["train_flops_per_token"]["4"] == pytest.approx(per_token, rel=0.01)
    assert report["realised_flops"] == pytest.approx(straight["summary"]["flops"], rel=1e-12)
    _, shown, _ = run_cli(capsys, "compute", straight["toml"])
    assert "model: transformers' Inkling2LoopForCausalLM" in shown
    assert "measured by torch's FlopCounterMode, per token" in shown


def test_a_sweep_with_a_compute_matched_arm(straight, capsys, tmp_path):
    """A uniform arm given the fixed-first run's modeled FLOPs (under the measured model) ends
    within one of its own steps below them, and both are evaluated at every serving depth."""
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(
        f'base = "{straight["toml"]}"\n[sweep]\neval_batches = 1\n'
        '[[runs]]\nname = "ff"\n'
        '[[runs]]\nname = "matched"\nschedule.kind = "uniform"\nflops_of = "ff"\n'
    )
    code, _, err = run_cli(capsys, "sweep", sweep, "--out", tmp_path / "out", "--quiet")
    assert code in (0, None), err
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    rows = {r["name"]: r for r in results["runs"]}
    ff, matched = rows["ff"], rows["matched"]
    budget = ff["modeled_flops"]
    assert matched["flop_budget"] == budget
    plan = run_plan(load_config(sweep.parent / "out" / "runs" / "matched" / "config.toml"))
    deepest_step = plan.step_flops(plan.schedule.config.k_max)
    assert budget - deepest_step < matched["modeled_flops"] <= budget
    assert matched["tokens"] < ff["tokens"]  # uniform 1..3 costs more per step
    assert set(matched["nll_by_depth"]) >= {str(k) for k in range(1, 17)}


def test_two_ddp_processes_train_what_one_does(straight, tmp_path):
    """`--nproc 2` on gloo: at one pass the message gates get no gradient (an expert no token
    reached still has one: the experts are one tensor per layer); DDP, told the model leaves
    parameters unused, trains the same run as one process."""
    run = tmp_path / "ddp"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src") + os.pathsep + str(ROOT),
        "OMP_NUM_THREADS": "1",
        "FIXEDFIRST_DIST_TIMEOUT": "60",
    }
    command = [sys.executable, "-m", "fixedfirst", "train", str(straight["toml"])]
    command += ["--out", str(run), "--quiet", "--nproc", "2"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    single, ddp = train_records(straight["root"] / "run"), train_records(run)
    assert [r["depth"] for r in ddp] == [r["depth"] for r in single]
    assert [r["depth"] for r in ddp][:5] == [1] * 5  # the gates unused for five steps
    for key in ("loss", "grad_norm"):
        torch.testing.assert_close(
            torch.tensor([r[key] for r in ddp], dtype=torch.float64),
            torch.tensor([r[key] for r in single], dtype=torch.float64),
            **TOLERANCE,
        )
    a, b = final_weights(straight["root"] / "run"), final_weights(run)
    for key in a:
        torch.testing.assert_close(a[key], b[key], **TOLERANCE)
    steps = sorted((run / "checkpoints").glob("step-*"))
    assert json.loads((steps[-1] / "meta.json").read_text())["world_size"] == 2
