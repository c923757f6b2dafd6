"""`fixedfirst plan`: wall-clock from the compute model, the largest micro-batch that fits, what
to change when nothing fits, and sweep files run by run."""

from __future__ import annotations

import json

import pytest

from fixedfirst.cli.compute_cmd import report
from fixedfirst.cli.main import main
from fixedfirst.compute.flops import flop_model
from fixedfirst.compute.memory import MARGIN, Placement, training_memory
from fixedfirst.machine.planning import Hardware, MfuByDepth, measured_mfu, plan_on_gpus
from tests.trainer_helpers import TINY_TOML, tiny_config


def hardware(gpus: int = 1, memory: float = 1e12, peak: float = 1e12, mfu: float = 0.5):
    return Hardware("test GPU", gpus, int(memory), peak, MfuByDepth.flat(mfu, "a test"))


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
    assert "MFU 0.509 at every depth, from nanochat's depth-32 GPT" in out
    assert "| depth | steps | share of the FLOPs | MFU | wall-clock |" in out


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


def test_the_wall_clock_is_the_sum_over_the_depths_the_run_draws():
    """Each step at its own depth's MFU (linear between measured depths: numpy's interp, an
    independent reference), summed step by step over the depths the schedule draws, which is
    not the run's FLOPs at any one of the MFUs."""
    np = pytest.importorskip("numpy")
    config = tiny_config("schedule.switch=0.25")
    measured = MfuByDepth(((1, 0.2), (3, 0.3), (6, 0.45)), "a test")
    plan = plan_on_gpus(config, Hardware("GPU", 2, 10**12, 3e9, measured))
    expected = 0.0
    for step in range(plan.run.total_steps):
        depth = plan.run.depth(step)
        mfu = np.interp(depth, [1, 3, 6], [0.2, 0.3, 0.45])
        expected += plan.run.step_flops(depth) / (2 * 3e9 * mfu)
    assert plan.seconds(checkpoint=False) == pytest.approx(expected, rel=1e-12)
    assert {s.depth for s in plan.by_depth(False)} == set(range(1, 7))
    for mfu in (0.2, 0.3, 0.45):
        flat = plan_on_gpus(config, hardware(gpus=2, peak=3e9, mfu=mfu)).seconds(False)
        assert plan.seconds(False) != pytest.approx(flat, rel=0.02)


def test_a_first_runs_output_gives_the_mfu_by_depth(tmp_path, capsys, monkeypatch):
    """`--measured DIR` reads benchmarks/first_run.py's first-run.json: the compiled step's MFU
    against the datasheet's peak where that section ran, and names where it came from."""
    rows = [
        {"mode": mode, "depth": depth, "seconds": 1.0, "mfu": {"measured": 0.9, "datasheet": mfu}}
        for mode, scale in (("eager", 0.5), ("compiled", 1.0))
        for depth, mfu in ((1, 0.2 * scale), (4, 0.3 * scale), (16, 0.4 * scale))
    ]
    data = {"environment": {"device": "NVIDIA H200"}, "speed": {"rows": rows}}
    (tmp_path / "first-run.json").write_text(json.dumps(data))
    table = measured_mfu(tmp_path)
    assert table.points == ((1, 0.2), (4, 0.3), (16, 0.4))
    assert table.at(2) == pytest.approx(0.2 + 0.1 / 3) and table.at(32) == 0.4
    assert "benchmarks/first_run.py on NVIDIA H200" in table.source and "compiled" in table.source
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.toml").write_text(TINY_TOML)
    with pytest.raises(SystemExit):
        main(["plan", "tiny.toml", "--gpu", "h200", "--measured", str(tmp_path)])
    out = capsys.readouterr().out
    assert "MFU by depth (K=1: 0.2, K=4: 0.3, K=16: 0.4; linear between), from " in out


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (5.6e-6, "5.6 µs"),
        (4e-4, "400 µs"),
        (0.0274, "27 ms"),
        (0.9996, "1.0 s"),
        (2.49, "2.5 s"),
        (27.4, "27 s"),
        (59.4, "59 s"),
        (59.6, "1 min"),
        (3000, "50 min"),
        (7200, "2.0 h"),
    ],
)
def test_a_short_run_is_predicted_in_seconds_not_as_0_min(seconds, shown):
    from fixedfirst.cli.plan_cmd import duration

    assert duration(seconds) == shown
