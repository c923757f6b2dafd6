"""`fixedfirst plan`: wall-clock from the compute model, the largest micro-batch that fits, what
to change when nothing fits, and sweep files run by run."""

from __future__ import annotations

import pytest

from fixedfirst.cli.compute_cmd import report
from fixedfirst.cli.main import main
from fixedfirst.compute.flops import flop_model
from fixedfirst.compute.memory import MARGIN, Placement, training_memory
from fixedfirst.machine.planning import Hardware, plan_on_gpus
from tests.trainer_helpers import TINY_TOML, tiny_config


def hardware(gpus: int = 1, memory: float = 1e12, peak: float = 1e12, mfu: float = 0.5):
    return Hardware("test GPU", gpus, int(memory), peak, mfu)


def test_wall_clock_is_the_compute_models_flops_at_the_given_rate():
    config = tiny_config()
    plan = plan_on_gpus(config, hardware(gpus=2, peak=3e9, mfu=0.25))
    flops = report(config)["realised_flops"]  # `fixedfirst compute`'s number
    assert plan.seconds(checkpoint=False) == pytest.approx(flops / (2 * 3e9 * 0.25))


@pytest.mark.parametrize("grad_depth", [None, 3])
def test_checkpointing_costs_one_more_forward_of_each_iteration_with_gradients(grad_depth):
    extra = [] if grad_depth is None else [f"train.grad_depth={grad_depth}"]
    config = tiny_config("schedule.kind=fixed", "schedule.depth=5", *extra)
    plan = plan_on_gpus(config, hardware())
    t = config.train
    iteration = flop_model(config.model, t.seq_len).iteration
    steps = plan.run.total_steps
    graded = 5 if grad_depth is None else grad_depth
    assert plan.recompute_flops == pytest.approx(steps * t.tokens_per_step * graded * iteration)
    assert plan.seconds(True) > plan.seconds(False)


def needed(config, micro: int, strategy: str = "single", gpus: int = 1, checkpoint=False):
    where = Placement("cuda", True, strategy, gpus)  # type: ignore[arg-type]
    local = config.train.batch_size // gpus
    return training_memory(
        config.model, where, micro, local // micro, config.train.seq_len, 6, None, checkpoint
    ).peak


def test_the_largest_micro_batch_that_fits_is_found_and_offered():
    config = tiny_config("train.micro_batch_size=8")
    memory = (needed(config, 2) + needed(config, 4)) / 2 / (1 - MARGIN)
    plan = plan_on_gpus(config, hardware(memory=memory))
    plain = next(o for o in plan.options if not o.checkpoint)
    assert not plain.fits and plain.largest_micro_batch == 2
    from fixedfirst.cli.plan_cmd import verdict

    said = verdict(plan)
    assert said[0].startswith("as configured (one GPU, checkpointing off, micro-batches of 8)")
    assert "  train.micro_batch_size = 2" in said


def test_when_nothing_fits_it_names_the_gpus_that_would():
    """Sharding divides the weights, gradients and AdamW state, not one sequence's activations:
    a model whose state fills a GPU fits, with FSDP2, on the fewest GPUs that split it enough."""
    config = tiny_config("model.d_model=256", "model.vocab_size=32000")
    memory = needed(config, 1, "fsdp", 4, checkpoint=True) / (1 - MARGIN) * 1.0001
    assert needed(config, 1, "fsdp", 2, checkpoint=True) > memory * (1 - MARGIN)
    plan = plan_on_gpus(config, hardware(memory=memory))
    assert all(o.largest_micro_batch is None for o in plan.options)
    assert plan.gpus_needed == 4


def test_plan_prints_the_table_the_verdict_and_the_wall_clock(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.toml").write_text(TINY_TOML)
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", "tiny.toml", "--gpus", "2", "--gpu", "a100-40gb"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "2 x NVIDIA A100 40GB (SXM): 40.0 GiB and 312 TFLOP/s peak per GPU" in out
    assert "| DDP | off |" in out and "| FSDP2 | on |" in out
    assert "as configured (DDP, checkpointing off, micro-batches of 4): fits" in out
    assert "MFU 0.581 is assumed: our step's at depth 16 on a CPU" in out


def test_a_sweep_is_planned_run_by_run(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.toml").write_text(TINY_TOML)
    (tmp_path / "sweep.toml").write_text(
        'base = "tiny.toml"\n\n[[runs]]\nname = "deep"\nschedule.kind = "fixed"\n'
        'schedule.depth = 64\n\n[[runs]]\nname = "shallow"\nschedule.kind = "fixed"\n'
        "schedule.depth = 1\n"
    )
    memory = needed(tiny_config(), 4) * 4  # room for depth 1, not for 64
    with pytest.raises(SystemExit):
        main(["plan", "sweep.toml", "--gpu-memory", str(memory / 2**30), "--peak-flops", "1"])
    out = capsys.readouterr().out
    deep = next(line for line in out.splitlines() if line.startswith("| deep |"))
    shallow = next(line for line in out.splitlines() if line.startswith("| shallow |"))
    assert "| 64 |" in deep and "| no |" in deep
    assert "| 1 |" in shallow and "| yes |" in shallow
    assert "deep: as configured (one GPU, checkpointing off, micro-batches of 4): does not" in out


def test_fp32_runs_are_planned_at_the_fp32_peak(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.toml").write_text(TINY_TOML)
    with pytest.raises(SystemExit):
        main(["plan", "tiny.toml", "--gpu", "h100", "--set", "train.precision=fp32"])
    assert "and 67 TFLOP/s peak per GPU" in capsys.readouterr().out


def test_the_assumed_mfu_is_the_measurement_the_readme_reports():
    """ASSUMED_MFU quotes benchmarks/depth_eval.py's training MFU at depth 16 (README,
    Benchmarks); when the benchmark is re-run and the README updated, this says to update it."""
    from pathlib import Path

    from fixedfirst.machine.planning import ASSUMED_MFU

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    table = readme[readme.index("| training depth | median s/step |") :]
    row = next(line for line in table.splitlines() if line.startswith("| 16 |"))
    assert row.split("|")[-2].strip() == f"{100 * ASSUMED_MFU:.1f}%"
