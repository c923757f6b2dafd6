"""Benchmark: training memory and step time at depth, plain, checkpointed and truncated.

    .venv/bin/python benchmarks/depth_memory.py [--d 128] [--depths 4,16,32,64] [--repeats 3]

Under full backprop every core iteration keeps its activations for the backward, so memory
grows linearly with K (Huginn's users run out of memory at depth). Three ways to train at depth
K, on the peer benchmark's architecture (benchmarks/peer_step.py: 1 prelude / 2 core / 1 coda,
SwiGLU 4d, sandwich norm, tied embeddings, vocabulary 2048, batch 32 x 128, fp32):

- plain: full backprop through all K iterations;
- checkpointed (`train.checkpoint_activations`): full backprop, each iteration recomputed from
  its saved input state in the backward, so only one (B, T, d) state per iteration is kept;
- truncated (`train.grad_depth = 4`): gradients through the last 4 iterations only (a different
  training signal, not the same gradients; shown for its memory and time).

Peak memory is torch's own count of the step's tensors (`fixedfirst.train.peak_memory`,
torch's MemTracker: parameters, gradients, AdamW state, activations, temporaries), measured on
one step apart from the timed ones (benchmarks/memory_model.py holds the memory model to the same
measurement); step time is the median of `--repeats` steps, the three ways
alternating at each depth.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import torch

from fixedfirst.config import ModelConfig, TrainConfig
from fixedfirst.data.source import Batch
from fixedfirst.machine.device import choose_threads
from fixedfirst.model import LoopedTransformer
from fixedfirst.train.optim import build_optimizer
from fixedfirst.train.parallel import ParallelModel
from fixedfirst.train.peak_memory import step_peak
from fixedfirst.train.step import StepContext, state_seeds, train_step

VOCAB, BATCH, SEQ = 2048, 32, 128
WAYS = {
    "plain": {},
    "checkpointed": {"checkpoint_activations": True},
    "truncated (grad_depth 4)": {"grad_depth": 4},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--depths", default="4,16,32,64")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    threads, why = choose_threads(args.threads)
    why = "--threads" if args.threads else why
    torch.set_num_threads(threads)
    d = args.d
    config = ModelConfig(
        vocab_size=VOCAB,
        d_model=d,
        n_heads=d // 64,
        d_ff=4 * d,
        norm="sandwich",
        tie_embeddings=True,
        max_seq_len=SEQ,
    )
    torch.manual_seed(0)
    model = LoopedTransformer(config).train()
    trains = {name: TrainConfig(batch_size=BATCH, seq_len=SEQ, **kw) for name, kw in WAYS.items()}
    optimizer = build_optimizer(model, trains["plain"])
    x = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=torch.Generator().manual_seed(1))
    batch = Batch(x[:, :-1], x[:, 1:])
    seeds = state_seeds(0, 0, range(BATCH))
    parallel = ParallelModel.alone(model)
    contexts = {name: StepContext(parallel, optimizer, train) for name, train in trains.items()}

    def step(name: str, depth: int) -> None:
        loss, _ = train_step(contexts[name], batch, depth, 1e-4, seeds)
        loss.item()

    step("plain", 1)  # AdamW's state exists from here on, as in any step after the first
    print(
        f"d={d}, {model.parameter_counts()['total'] / 1e6:.2f}M parameters, batch {BATCH} x "
        f"{SEQ}, fp32, torch {torch.__version__}, {threads} thread(s) ({why})"
    )
    print("\n| K | way | peak memory MiB | vs plain K=4 | s/step | vs plain at this K |")
    print("| --- | --- | --- | --- | --- | --- |")
    base_memory = None
    for depth in [int(v) for v in args.depths.split(",")]:
        memory, times = {}, {name: [] for name in WAYS}
        for name in WAYS:
            run = functools.partial(step, name, depth)
            memory[name] = step_peak(torch.device("cpu"), run, model, optimizer).tensors
        for _ in range(args.repeats):
            for name in WAYS:
                t0 = time.perf_counter()
                step(name, depth)
                times[name].append(time.perf_counter() - t0)
        base_memory = base_memory or memory["plain"]
        for name in WAYS:
            ratio = statistics.median(
                t / p for t, p in zip(times[name], times["plain"], strict=True)
            )
            print(
                f"| {depth} | {name} | {memory[name] / 2**20:,.0f} | "
                f"{memory[name] / base_memory:.2f}x | {statistics.median(times[name]):.3f} | "
                f"{ratio:.2f}x |"
            )


if __name__ == "__main__":
    main()
