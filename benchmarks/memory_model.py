"""Benchmark: the memory model (fixedfirst/compute/memory.py) against measured peak memory.

    .venv/bin/python benchmarks/memory_model.py [--depths 1,4,16,64] [--other-depths 1,16]
        [--paper-depth 4]

Two checks, one table:

1. Measured on this CPU: one real training step (the trainer's `train_step`, AdamW state already
   there) of three small models that between them switch every option the model counts (SwiGLU
   and GELU, pre-norm and sandwich, concat and add injection, tied embeddings, prelude and coda
   sizes), with and without activation checkpointing, in fp32 and in bf16 autocast: the first at
   `--depths`, the others at `--other-depths` (MemTracker's per-operation bookkeeping makes a
   deep step slow, and the other two differ from the first in layers, not in depth). The peak
   is torch's MemTracker count of the step's tensors (fixedfirst.train.peak_memory).
2. Paper scale, accounted with fake tensors: configs/lm-200m.toml in one process and
   configs/lm-1b.toml under FSDP2 over 8 processes (a fake process group), bf16, at the
   configs' micro-batch sizes and `--paper-depth`. FakeTensorMode runs the same step on tensors
   that have shapes and no memory, and the same MemTracker counts them: the accounting of a
   40-110 GiB step on a machine with far less.

Every row is one micro-batch per step: MemTracker refuses a model called twice in a step, so the
gradients kept between micro-batches are modeled but not measured here. The model is of CPU
PyTorch in these rows; on CUDA it counts F.rms_norm's fused kernel, which the first run on a GPU
(benchmarks/first_run.py) measures.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import time
from collections.abc import Iterator

import torch

from fixedfirst.compute.memory import Placement, training_memory
from fixedfirst.config import ModelConfig, RunConfig, TrainConfig, load_config
from fixedfirst.data.source import Batch
from fixedfirst.model import LoopedTransformer
from fixedfirst.train.optim import build_optimizer
from fixedfirst.train.parallel import ParallelModel
from fixedfirst.train.peak_memory import step_peak
from fixedfirst.train.step import StepContext, state_seeds, train_step

SHAPES = {
    "d128 swiglu pre concat": dict(vocab_size=256, d_model=128, n_heads=2),
    "d64 sandwich add": dict(
        vocab_size=512, d_model=64, n_heads=2, norm="sandwich", injection="add"
    ),
    "d96 gelu tied, 2+1+0 layers": dict(
        vocab_size=300,
        d_model=96,
        n_heads=3,
        mlp="gelu",
        tie_embeddings=True,
        n_prelude=2,
        n_coda=0,
    ),
}
ROWS, SEQ = 4, 64
CPU = torch.device("cpu")


def measured_step(
    model_config: ModelConfig, train: TrainConfig, depth: int, dtype: torch.dtype
) -> int:
    """Peak tensor bytes of one step at `depth`, after a first step has made AdamW's state."""
    torch.manual_seed(0)
    model = LoopedTransformer(model_config).train()
    optimizer = build_optimizer(model, train)
    rows = train.micro_batch()
    x = torch.randint(0, model_config.vocab_size, (rows, train.seq_len + 1))
    batch = Batch(x[:, :-1], x[:, 1:])
    seeds = state_seeds(0, 0, range(rows))
    context = StepContext(ParallelModel.alone(model), optimizer, train, dtype)
    train_step(context, batch, 1, 1e-4, seeds)

    def step() -> None:
        train_step(context, batch, depth, 1e-4, seeds)

    return step_peak(CPU, step, model, optimizer, batch.inputs, batch.targets).tensors


@contextlib.contextmanager
def fake_tensors() -> Iterator[None]:
    """FakeTensorMode, with the truncated-normal initialisation made a no-op: it asks for a
    data-dependent value fake tensors cannot give, and values do not change memory."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    draw = torch.nn.init.trunc_normal_
    torch.nn.init.trunc_normal_ = lambda tensor, *args, **kwargs: tensor
    try:
        with FakeTensorMode():
            yield
    finally:
        torch.nn.init.trunc_normal_ = draw


def fake_fsdp_step(config: RunConfig, processes: int, depth: int, checkpoint: bool) -> int:
    """One FSDP2 step of rank 0 of `processes`, on fake tensors and a fake process group."""
    import torch.distributed as dist
    import torch.distributed.device_mesh as device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from fixedfirst.train.distributed import World

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=processes)
    mesh = device_mesh.init_device_mesh("cpu", (processes,))  # outside fake mode
    make_mesh = device_mesh.init_device_mesh
    device_mesh.init_device_mesh = lambda *args, **kwargs: mesh
    try:
        t = config.train
        rows = t.micro_batch(processes)
        train = dataclasses.replace(
            t, batch_size=rows, micro_batch_size=rows, checkpoint_activations=checkpoint
        )
        with fake_tensors():
            model = LoopedTransformer(config.model).train()
            world = World(0, processes, 0, launched=True)
            parallel = ParallelModel(model, world, "fsdp", CPU, torch.bfloat16)
            optimizer = build_optimizer(model, train)
            x = torch.randint(0, config.model.vocab_size, (rows, t.seq_len + 1))
            batch = Batch(x[:, :-1], x[:, 1:])
            seeds = state_seeds(0, 0, range(rows))
            context = StepContext(parallel, optimizer, train, torch.bfloat16)
            train_step(context, batch, 1, 1e-4, seeds)

            def step() -> None:
                train_step(context, batch, depth, 1e-4, seeds)

            return step_peak(CPU, step, model, optimizer).tensors
    finally:
        device_mesh.init_device_mesh = make_mesh
        dist.destroy_process_group()


def fake_single_step(config: RunConfig, depth: int, checkpoint: bool) -> int:
    train = dataclasses.replace(config.train, checkpoint_activations=checkpoint)
    train = dataclasses.replace(train, batch_size=train.micro_batch())
    with fake_tensors():
        return measured_step(config.model, train, depth, torch.bfloat16)


def row(what: str, depth: int, checkpoint: bool, precision: str, measured: int, model: int):
    error = model / measured - 1
    print(
        f"| {what} | {depth} | {'on' if checkpoint else 'off'} | {precision} | "
        f"{measured / 2**20:,.1f} | {model / 2**20:,.1f} | {100 * error:+.1f}% |",
        flush=True,
    )
    return error


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", default="1,4,16,64")
    parser.add_argument("--other-depths", default="1,16")
    parser.add_argument("--paper-depth", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(1)
    started = time.perf_counter()
    print(f"torch {torch.__version__}, {ROWS} x {SEQ} tokens per small-model step, one thread\n")
    print("| model | K | checkpointing | precision | measured MiB | memory model MiB | error |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    errors = []
    for index, (name, shape) in enumerate(SHAPES.items()):
        model_config = ModelConfig(max_seq_len=SEQ, **shape)
        depths = args.other_depths if index else args.depths
        for depth in [int(v) for v in depths.split(",")]:
            for checkpoint in (False, True):
                for dtype in (torch.float32, torch.bfloat16):
                    train = TrainConfig(
                        batch_size=ROWS, seq_len=SEQ, checkpoint_activations=checkpoint
                    )
                    measured = measured_step(model_config, train, depth, dtype)
                    bf16 = dtype == torch.bfloat16
                    model = training_memory(
                        model_config, Placement("cpu", bf16), ROWS, 1, SEQ, depth, None, checkpoint
                    ).peak
                    precision = "bf16" if bf16 else "fp32"
                    errors.append(row(name, depth, checkpoint, precision, measured, model))
    small = time.perf_counter() - started
    k = args.paper_depth
    lm200m = load_config("configs/lm-200m.toml")
    for checkpoint in (False, True):
        measured = fake_single_step(lm200m, k, checkpoint)
        t = lm200m.train
        model = training_memory(
            lm200m.model, Placement("cpu", True), t.micro_batch(), 1, t.seq_len, k, None, checkpoint
        ).peak
        what = f"lm-200m, one process, micro-batch {t.micro_batch()} (fake tensors)"
        errors.append(row(what, k, checkpoint, "bf16", measured, model))
    lm1b = load_config("configs/lm-1b.toml")
    t = lm1b.train
    where = Placement("cpu", True, "fsdp", 8)
    for checkpoint in (False, True):
        measured = fake_fsdp_step(lm1b, 8, k, checkpoint)
        model = training_memory(
            lm1b.model, where, t.micro_batch(), 1, t.seq_len, k, None, checkpoint
        ).peak
        what = f"lm-1b, FSDP2 over 8, micro-batch {t.micro_batch()} (fake tensors)"
        errors.append(row(what, k, checkpoint, "bf16", measured, model))
    worst = max(errors, key=abs)
    print(
        f"\nlargest error {100 * worst:+.1f}% over {len(errors)} rows; wall-clock: small models "
        f"{small:.0f} s, paper scale {time.perf_counter() - started - small:.0f} s; "
        f"{time.process_time():.0f} s of CPU in all"
    )


if __name__ == "__main__":
    main()
