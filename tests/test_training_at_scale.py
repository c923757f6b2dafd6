"""What a long run on GPUs needs from the trainer, checked on the CPU (docs/design.md §8):
the garbage collector out of the steps, CUDA's settings, checkpoints written while training goes
on, FSDP2 gathering its root unit once a step, and the data's checksums read by one process
per machine."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from fixedfirst.config import TrainConfig
from fixedfirst.data.source import Batch
from fixedfirst.errors import UserError
from fixedfirst.evaluation.nll import exact
from fixedfirst.machine import device as machine
from fixedfirst.model import LoopedTransformer
from fixedfirst.runs.checkpoint import CheckpointManager
from fixedfirst.train import trainer as trainer_module
from fixedfirst.train.checkpoint_writes import CheckpointWrites, live_storages, own_copy
from fixedfirst.train.distributed import World
from fixedfirst.train.optim import build_optimizer
from fixedfirst.train.parallel import ParallelModel
from fixedfirst.train.step import StepContext, forward_backward, state_seeds, train_step
from fixedfirst.train.trainer import Trainer
from tests.conftest import tiny_model_config
from tests.trainer_helpers import tiny_config

ROOT = Path(__file__).resolve().parents[1]


# -- the garbage collector --------------------------------------------------------------------


def test_the_collector_runs_at_log_lines_and_checkpoints_only(tmp_path, monkeypatch):
    """Steps run with the collector off and what existed before step 0 frozen; a log line
    collects the young generations, a checkpoint all of them; afterwards all is as before."""
    events: list[tuple[str, int]] = []
    step = trainer_module.train_step

    def observed(*args, **kwargs):
        assert not gc.isenabled() and gc.get_freeze_count() > 0
        events.append(("step", 0))
        return step(*args, **kwargs)

    def collected(phase: str, info: dict) -> None:
        if phase == "start":
            events.append(("gc", info["generation"]))

    monkeypatch.setattr(trainer_module, "train_step", observed)
    config = tiny_config("train.tokens=1536", "train.log_every=2", "train.checkpoint_every=4")
    run = Trainer(config, str(tmp_path / "run"), quiet=True)
    gc.callbacks.append(collected)
    try:
        run.train()
    finally:
        gc.callbacks.remove(collected)
    assert gc.isenabled() and gc.get_freeze_count() == 0
    steps = 0
    after: dict[int, list[int]] = {}
    for kind, value in events:
        if kind == "step":
            steps += 1
        else:
            after.setdefault(steps, []).append(value)
    first = min(after)
    assert first in (0, 2)  # before step 0 (freezing), or the first log line
    boundaries = {s: g for s, g in after.items() if s > 0}
    checkpoints = {4, 8, 12, run.scheduler.switch_step}  # periodic, the switch's and the last
    assert run.scheduler.switch_step == 6 and set(boundaries) == {2, 4, 6, 8, 10, 12}
    assert boundaries == {s: [2] if s in checkpoints else [1] for s in boundaries}


# -- CUDA's settings ---------------------------------------------------------------------------


def test_cuda_settings_ask_for_tf32_and_expandable_segments_and_leave_the_cpu_alone(monkeypatch):
    before = torch.get_float32_matmul_precision()
    monkeypatch.delenv(machine.ALLOCATOR_ENV, raising=False)
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    try:
        machine.cuda_settings(torch.device("cpu"))
        assert torch.get_float32_matmul_precision() == before
        assert machine.ALLOCATOR_ENV not in os.environ
        machine.cuda_settings(torch.device("cuda"))  # sets, allocates nothing
        assert torch.get_float32_matmul_precision() == "high"
        assert os.environ[machine.ALLOCATOR_ENV] == "expandable_segments:True"
        with exact(torch.device("cuda"), torch.float32):
            assert torch.get_float32_matmul_precision() == "highest"
        with exact(torch.device("cuda"), torch.bfloat16):
            assert torch.get_float32_matmul_precision() == "high"
        assert torch.get_float32_matmul_precision() == "high"
        monkeypatch.setenv(machine.ALLOCATOR_ENV, "max_split_size_mb:512")
        machine.cuda_settings(torch.device("cuda"))
        assert os.environ[machine.ALLOCATOR_ENV] == "max_split_size_mb:512"  # a choice kept
    finally:
        torch.set_float32_matmul_precision(before)


def test_adamw_is_fused_where_the_trainer_asks():
    model = LoopedTransformer(tiny_model_config())
    assert build_optimizer(model, TrainConfig(), fused=True).defaults["fused"] is True
    assert not build_optimizer(model, TrainConfig()).defaults["fused"]  # the CPU's, as before


def test_a_bf16_runs_last_evaluation_is_made_in_fp32_too(tmp_path):
    """On a GPU a bf16 run's last evaluation is also made in fp32 (TF32 off), what a CPU
    scores; here the CPU's bf16 autocast stands in for the GPU's, the evaluations set as the
    trainer sets them on CUDA. The fp32 numbers are the fp32 model's, the bf16 ones near them."""
    from fixedfirst.evaluation.nll import validation_nll
    from fixedfirst.train.metrics import read_metrics

    config = tiny_config("train.tokens=1024", "train.precision=bf16", "eval.depths=[1,2]")
    run = Trainer(config, str(tmp_path / "run"), quiet=True)
    assert run.eval_dtypes == [torch.bfloat16]  # on the CPU, as before
    run.eval_dtypes = [torch.bfloat16, torch.float32]
    run.train()
    evaluations = [
        r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["kind"] == "eval"
    ]
    assert all("nll_by_depth_fp32" not in r for r in evaluations[:-1])
    last = evaluations[-1]
    exact = validation_nll(run.model, run.val_batches, [1, 2], torch.device("cpu"))
    assert last["nll_by_depth_fp32"] == {str(d): v for d, v in exact.items()}
    for depth, nll in last["nll_by_depth"].items():
        assert nll == pytest.approx(last["nll_by_depth_fp32"][depth], abs=0.02)
        assert nll != last["nll_by_depth_fp32"][depth]


# -- checkpoints written beside the training ---------------------------------------------------


class HeldWrites(CheckpointManager):
    """Checkpoints whose writing waits until `release` is set, or fails with `error`."""

    def __init__(self, directory: Path, error: Exception | None = None) -> None:
        super().__init__(directory)
        self.release = threading.Event()
        self.error = error

    def save(self, *args, **kwargs):
        assert self.release.wait(timeout=60)
        if self.error is not None:
            raise self.error
        return super().save(*args, **kwargs)


def contents(value: float):
    return {"w": torch.full((3,), value)}, {"data": {"position": 1}}, {"note": value}


def test_a_checkpoint_is_written_while_the_caller_goes_on(tmp_path):
    checkpoints = HeldWrites(tmp_path / "checkpoints")
    writes = CheckpointWrites(World(), checkpoints, set)
    writes.start(4, ["periodic"], lambda: contents(1.0))  # returns with the write held
    assert checkpoints.all() == []
    checkpoints.release.set()
    saved = writes.settle()
    assert saved is not None and saved.step == 4 and saved.meta["note"] == 1.0
    assert [c.step for c in checkpoints.all()] == [4]
    assert writes.settle() is None  # nothing in flight


def test_a_failed_write_is_raised_where_it_is_settled(tmp_path):
    checkpoints = HeldWrites(tmp_path / "checkpoints", UserError("cannot write checkpoint X"))
    writes = CheckpointWrites(World(), checkpoints, set)
    writes.start(4, ["periodic"], lambda: contents(1.0))
    checkpoints.release.set()
    with pytest.raises(UserError, match="cannot write checkpoint X"):
        writes.start(8, ["periodic"], lambda: contents(2.0))  # the next one settles it first
    assert checkpoints.all() == []


def test_the_writer_gets_its_own_copy_of_what_training_updates_in_place():
    model = LoopedTransformer(tiny_model_config())
    optimizer = build_optimizer(model, TrainConfig())
    weights = dict(model.state_dict())
    other = torch.ones(2)
    copied, _, _ = own_copy(({**weights, "other": other}, {}, {}), live_storages(model, optimizer))
    for name, value in weights.items():
        assert torch.equal(copied[name], value)
        assert copied[name].untyped_storage().data_ptr() != value.untyped_storage().data_ptr()
    assert copied["other"] is other


# -- FSDP2 over micro-batches ------------------------------------------------------------------


def test_fsdp2_keeps_its_root_gathered_from_one_micro_batch_to_the_next(tmp_path):
    """The root unit (embedding, core, head) is gathered once a step, not once a micro-batch:
    after a micro-batch that is not the step's last its parameters are still whole tensors,
    after the last they are shards again; the step trains what one process does."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    train = TrainConfig(batch_size=4, seq_len=16, micro_batch_size=2)
    x = torch.randint(0, 61, (4, 17), generator=torch.Generator().manual_seed(0))
    batch = Batch(x[:, :-1], x[:, 1:])
    seeds = state_seeds(0, 0, range(4))

    def fresh() -> LoopedTransformer:
        torch.manual_seed(0)
        return LoopedTransformer(tiny_model_config())

    plain = ParallelModel.alone(fresh())
    expected, _ = train_step(
        StepContext(plain, build_optimizer(plain.module, train), train), batch, 3, 1e-3, seeds
    )
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        model = fresh()
        parallel = ParallelModel(
            model, World(0, 1, 0, launched=True), "fsdp", torch.device("cpu"), torch.float32
        )
        context = StepContext(parallel, build_optimizer(model, train), train)
        half = Batch(batch.inputs[:2], batch.targets[:2])
        scale = torch.tensor(0.01)
        root = model.core[0].attn.qkv.weight
        forward_backward(context, half, 3, seeds[:2], scale, last=False)
        assert not isinstance(model.core[0].attn.qkv.weight, DTensor)
        assert not isinstance(model.embed.weight, DTensor)
        forward_backward(context, half, 3, seeds[:2], scale, last=True)
        assert isinstance(model.core[0].attn.qkv.weight, DTensor) and isinstance(root, DTensor)
        context.optimizer.zero_grad(set_to_none=True)
        loss, _ = train_step(context, batch, 3, 1e-3, seeds)
    finally:
        dist.destroy_process_group()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)


# -- once per machine --------------------------------------------------------------------------

ONCE_PER_MACHINE = """
import os, sys
from fixedfirst.errors import UserError
from fixedfirst.train import distributed
import torch

world = distributed.World.from_env()
distributed.start(world, torch.device("cpu"))
ran = []
here = distributed.once_per_machine(world, lambda: ran.append(world.rank))
try:
    def refuse():
        raise UserError(f"shard changed (found by rank {world.rank})")
    distributed.once_per_machine(world, refuse)
    outcome = "passed"
except UserError as e:
    outcome = str(e)
waited = distributed.on_main(world, lambda: "on disk", patiently=True)
# One write per line: two ranks share the pipe, and print() writes the text and its newline
# apart, so their lines could run together.
line = f"rank {world.rank}: ran={ran} here={here} outcome={outcome} waited={waited}\\n"
os.write(1, line.encode())
distributed.stop()
"""


def test_one_process_per_machine_checks_and_every_process_hears_its_verdict(tmp_path):
    script = tmp_path / "once.py"
    script.write_text(ONCE_PER_MACHINE)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "OMP_NUM_THREADS": "1",
        "FIXEDFIRST_DIST_TIMEOUT": "60",
    }
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc_per_node", "2", str(script)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = sorted(line for line in done.stdout.splitlines() if line.startswith("rank "))
    verdict = "outcome=shard changed (found by rank 0) waited=on disk"
    assert lines == [
        f"rank 0: ran=[0] here=True {verdict}",
        f"rank 1: ran=[] here=False {verdict}",
    ]
