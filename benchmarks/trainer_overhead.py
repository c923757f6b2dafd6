"""Benchmark: what the trainer costs beyond the training step itself.

    .venv/bin/python benchmarks/trainer_overhead.py [--steps 60] [--d 128] [--depth 4]

Around the step (`train_step`: forward, backward, clipping, AdamW) the trainer draws each step's
batch from its data source, derives the per-row initial-state seeds, picks depth and learning
rate, keeps losses on the device between log lines, writes metric lines and counts FLOPs and
time. This runs the trainer on the default configuration (batch 16 x 128, synthetic data) with
`train_step` wrapped in a timer and reports the share of the loop's time spent outside it.
Evaluation and checkpoint writing are timed apart and left out (they are not per step). Both
shares come from the same steps, so a busy machine skews them little; `--blocks` repeats the
whole run and takes the median.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from fixedfirst.config import load_config
from fixedfirst.machine.device import choose_threads
from fixedfirst.train import trainer as trainer_module
from fixedfirst.train.trainer import Trainer


class Stopwatch:
    """Wraps a function and sums the seconds spent in it."""

    def __init__(self, fn):
        self.fn, self.seconds, self.calls = fn, 0.0, 0

    def __call__(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t0
            self.calls += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    threads, why = choose_threads(args.threads)
    why = "--threads" if args.threads else why
    overrides = [
        "schedule.kind=fixed",
        f"schedule.depth={args.depth}",
        f"model.d_model={args.d}",
        f"train.threads={threads}",
        "train.compile=false",
        "train.log_every=10",
    ]
    t = load_config(None, overrides).train
    config = load_config(None, [*overrides, f"train.tokens={args.steps * t.tokens_per_step}"])
    print(
        f"d={args.d}, depth {args.depth}, batch {t.batch_size} x {t.seq_len}, synthetic data, "
        f"{args.steps} steps per run, torch {torch.__version__}, {threads} thread(s) ({why})"
    )
    print("\n| run | loop s | in train_step s | outside it | steps/s |")
    print("| --- | --- | --- | --- | --- |")
    shares = []
    original = trainer_module.train_step
    with tempfile.TemporaryDirectory() as root:
        for block in range(args.blocks):
            step = Stopwatch(original)
            trainer_module.train_step = step
            try:
                trainer = Trainer(config, str(Path(root) / f"run-{block}"), quiet=True)
                trainer._evaluate = evaluate = Stopwatch(trainer._evaluate)
                trainer._save = save = Stopwatch(trainer._save)
                t0 = time.perf_counter()
                trainer.train()
                loop = time.perf_counter() - t0 - evaluate.seconds - save.seconds
            finally:
                trainer_module.train_step = original
            share = 1 - step.seconds / loop
            shares.append(share)
            print(
                f"| {block + 1} | {loop:.2f} | {step.seconds:.2f} | {100 * share:.1f}% | "
                f"{step.calls / loop:.2f} |"
            )
    print(f"\ntrainer overhead: {100 * statistics.median(shares):.1f}% of the loop (median)")


if __name__ == "__main__":
    main()
