"""How a run uses the machine: torch threads, and whether `train.compile = "auto"` compiles.

Speed itself is never asserted here (benchmarks/ measure it); these tests hold the decisions to
their rules and compiled training to the eager arithmetic.
"""

from __future__ import annotations

import math

import pytest
import torch

from fixedfirst.machine import device as hardware
from fixedfirst.train import compilation
from fixedfirst.train.trainer import Trainer
from tests.trainer_helpers import comparable, final_weights, tiny_config, train_records

CPU = torch.device("cpu")


def test_threads_come_from_the_config_then_the_environment_then_the_free_cores(monkeypatch):
    monkeypatch.setattr(hardware, "free_cores", lambda: 6)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert hardware.choose_threads(2) == (2, "train.threads")
    assert hardware.choose_threads(None) == (3, "OMP_NUM_THREADS")
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert hardware.choose_threads(None)[0] == 6
    assert hardware.choose_threads(None, processes_here=4)[0] == 1  # 6 // 4
    assert hardware.choose_threads(None, processes_here=8)[0] == 1  # never 0


def test_free_cores_counts_idle_cpus_of_this_process(monkeypatch):
    cpus = len(hardware.os.sched_getaffinity(0))
    assert 1 <= hardware.free_cores() <= cpus
    samples = iter(
        [
            {0: (100, 1000), 1: (100, 1000)},
            {0: (190, 1100), 1: (110, 1100)},  # cpu 0 90% idle, cpu 1 10% idle
        ]
    )
    monkeypatch.setattr(hardware, "_cpu_times", lambda _: next(samples))
    monkeypatch.setattr(hardware.time, "sleep", lambda _: None)
    monkeypatch.setattr(hardware.os, "sched_getaffinity", lambda _: {0, 1})
    assert hardware.free_cores() == 1


def test_the_trainer_uses_and_records_its_threads(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # train.threads wins over it
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        summary = Trainer(tiny_config("train.threads=1"), tmp_path / "run", quiet=True).train()
        assert torch.get_num_threads() == 1
        assert summary["threads"] == 1
    finally:
        torch.set_num_threads(before)


def test_mfu_is_measured_against_the_peak_the_user_gives(tmp_path, monkeypatch):
    """With FIXEDFIRST_PEAK_FLOPS the run times no matmul: every logged MFU is the step's modeled
    FLOPs per second over the given peak (checked through tokens per second, which shares the
    step's seconds), and the summary says where the peak came from."""

    def refuse(*_):
        raise AssertionError("measured the peak although one was given")

    monkeypatch.setattr(hardware, "measured_peak_flops", refuse)
    monkeypatch.setenv(hardware.PEAK_FLOPS_ENV, " 2.5e9 ")
    config = tiny_config("train.log_every=1")
    summary = Trainer(config, tmp_path / "run", quiet=True).train()
    assert summary["peak_flops"] == {"per_process": 2.5e9, "from": "FIXEDFIRST_PEAK_FLOPS"}
    records = train_records(tmp_path / "run")
    flops = [0.0] + [r["flops"] for r in records]
    for before, r in zip(flops[:-1], records, strict=True):
        step_flops = r["flops"] - before
        seconds = config.train.tokens_per_step / r["tok_per_s"]
        assert r["mfu"] == pytest.approx(step_flops / seconds / 2.5e9, rel=1e-9)


@pytest.mark.parametrize("given", ["fast", "0", "-1e12", "inf", "nan"])
def test_a_peak_that_is_not_a_positive_rate_is_one_line(given, tmp_path, monkeypatch):
    """Refused with the run's other settings, before its directory is touched."""
    from fixedfirst.errors import UserError

    monkeypatch.setenv(hardware.PEAK_FLOPS_ENV, given)
    with pytest.raises(UserError, match=r"^FIXEDFIRST_PEAK_FLOPS='.+' is not a peak rate: give"):
        hardware.given_peak_flops()
    with pytest.raises(UserError, match=r"^FIXEDFIRST_PEAK_FLOPS="):
        Trainer(tiny_config(), tmp_path / "run", quiet=True)
    assert not (tmp_path / "run").exists()


def test_without_a_given_peak_the_run_measures_it(tmp_path, monkeypatch):
    monkeypatch.delenv(hardware.PEAK_FLOPS_ENV, raising=False)  # tests/conftest.py gives one
    monkeypatch.setattr(hardware, "measured_peak_flops", lambda device, dtype: 3e9)
    summary = Trainer(tiny_config(), tmp_path / "run", quiet=True).train(stop_after=2)
    assert summary["peak_flops"] == {"per_process": 3e9, "from": "measured"}


def test_the_measured_peak_is_a_real_matmul_rate():
    """Timed here (a second of CPU): positive and finite, and the same when asked again with the
    same threads (measured once per process)."""
    peak = hardware.measured_peak_flops("cpu", torch.float32)
    assert math.isfinite(peak) and peak > 1e6
    assert hardware.measured_peak_flops("cpu", torch.float32) == peak


def test_auto_compiles_only_runs_long_enough_to_repay_it(monkeypatch):
    peak = 1e11
    seconds_repaid = compilation.COLD_COMPILE_S / compilation.STEP_SAVING
    flops_repaid = seconds_repaid * peak * compilation.EAGER_MFU
    assert not compilation.decide("auto", CPU, 0.5 * flops_repaid, peak).compile
    assert compilation.decide("auto", CPU, 2 * flops_repaid, peak).compile
    assert compilation.decide(True, CPU, 1.0, peak).compile  # asked for: always
    assert not compilation.decide(False, CPU, 1e30, peak).compile
    monkeypatch.setattr(compilation.shutil, "which", lambda _: None)  # no C++ compiler
    decision = compilation.decide("auto", CPU, 1e30, peak)
    assert not decision.compile and "no compiler" in decision.reason


def test_small_runs_stay_eager_by_default(tiny_run):
    """The session's tiny run (train.compile left at "auto") did not compile."""
    assert tiny_run.summary["compiled"] is False


COMPILED_STEPS = ["train.tokens=1024", "train.checkpoint_every=0", "train.threads=1"]
"""Eight steps of the tiny run (fixed K0 = 2, then depths up to 6), one thread."""


def test_compiled_training_takes_the_same_steps_as_eager(tmp_path):
    """The tiny run (a prelude, the concat injection, a coda) trained with its loop compiled
    takes the steps eager fp32 takes: the same losses to 1e-5 at every step (fused kernels round
    differently, so not bit for bit), the same checkpoint keys, and the summary says how."""
    torch._dynamo.reset()
    eager = Trainer(tiny_config(*COMPILED_STEPS), tmp_path / "eager", quiet=True)
    eager.train()
    config = tiny_config(*COMPILED_STEPS, "train.compile=true")
    compiled = Trainer(config, tmp_path / "comp", quiet=True)
    assert compiled.compiled.compile
    summary = compiled.train()
    a, b = train_records(tmp_path / "eager"), train_records(tmp_path / "comp")
    assert len(a) == len(b) == 8 and len({r["depth"] for r in a}) > 2
    assert [r["loss"] for r in b] == pytest.approx([r["loss"] for r in a], rel=1e-5, abs=1e-5)
    assert compiled.model.state_dict().keys() == eager.model.state_dict().keys()
    assert summary["compiled"] is True and summary["compile_reason"] == "train.compile"
    assert summary["compile_cache"] == compilation.cache_directory() is not None
    assert summary["precision"] == "fp32" and summary["weights_dtype"] == "float32"


def test_a_resumed_compiled_run_is_the_uninterrupted_one_bit_for_bit(tmp_path):
    """Compiled, as eager: three steps, a pause and a resume in a new trainer (which compiles
    again, from the cache) give the weights and metric lines of eight steps straight through."""
    config = tiny_config(*COMPILED_STEPS, "train.compile=true")
    Trainer(config, tmp_path / "straight", quiet=True).train()
    Trainer(config, tmp_path / "paused", quiet=True).train(stop_after=3)
    Trainer(config, tmp_path / "paused", resume=True, quiet=True).train()
    a, b = final_weights(tmp_path / "straight"), final_weights(tmp_path / "paused")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert comparable(train_records(tmp_path / "straight")) == comparable(
        train_records(tmp_path / "paused")
    )


def test_compile_true_without_a_compiler_is_one_line_before_the_run_exists(tmp_path, monkeypatch):
    from fixedfirst.errors import UserError

    monkeypatch.setattr(compilation.shutil, "which", lambda _: None)
    with pytest.raises(
        UserError, match=r"^train.compile = true needs a C\+\+ compiler .+ or false$"
    ):
        Trainer(tiny_config("train.compile=true"), tmp_path / "run", quiet=True)
    assert not (tmp_path / "run").exists()


def test_a_shared_cache_is_set_while_inside_and_yields_to_the_users(tmp_path, monkeypatch):
    monkeypatch.delenv(compilation.CACHE_ENV, raising=False)
    with compilation.shared_cache(tmp_path / "cache"):
        assert compilation.cache_directory() == str((tmp_path / "cache").absolute())
    assert compilation.cache_directory() is None
    monkeypatch.setenv(compilation.CACHE_ENV, str(tmp_path / "mine"))
    with compilation.shared_cache(tmp_path / "cache"):
        assert compilation.cache_directory() == str(tmp_path / "mine")
    assert compilation.cache_directory() == str(tmp_path / "mine")
