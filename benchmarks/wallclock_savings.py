"""Benchmark: measured wall-clock savings of fixed-first against uniform 1..16, beside modeled.

    .venv/bin/python benchmarks/wallclock_savings.py [--steps 60] [--repeats 2]

Trains the same small configuration at the same token budget with uniform K in 1..16 and with
fixed-first (K0 = 2, switch 0.67, uniform finish), alternating the two `--repeats` times in one
process, and reports the median training wall-clock of each (the trainer's own per-step timing,
without evaluation or checkpoint writing), the measured savings and the modeled savings. The paper
reports 26-39% wall-clock against 30-45% modeled; the target here is measured >= 0.95 x modeled.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import torch

from fixedfirst.compute.plan import plan_run
from fixedfirst.config import load_config
from fixedfirst.train.trainer import Trainer

BASE = [
    "model.vocab_size=512",
    "model.d_model=128",
    "model.n_heads=4",
    "model.max_seq_len=128",
    "train.seq_len=128",
    "train.batch_size=16",
    "train.lr=1e-3",
    "train.log_every=1000",
    "eval.depths=[1]",
    "eval.batches=1",
]
SCHEDULES = {
    "uniform 1..16": ["schedule.kind=uniform"],
    "fixed-first K0=2 @0.67": [
        "schedule.kind=fixed-first",
        "schedule.k0=2",
        "schedule.switch=0.67",
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    tokens = args.steps * 16 * 128
    walls: dict[str, list[float]] = {name: [] for name in SCHEDULES}
    configs = {
        name: load_config(None, [*BASE, f"train.tokens={tokens}", *extra])
        for name, extra in SCHEDULES.items()
    }
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {args.steps} steps each")
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for name, config in configs.items():
                out = Path(tmp) / f"{len(walls[name])}-{name.split()[0]}"
                summary = Trainer(config, str(out), quiet=True).train()
                walls[name].append(summary["wall"])
                print(f"  repeat {r + 1}: {name}: {summary['wall']:.1f} s")
    uniform = statistics.median(walls["uniform 1..16"])
    print("\n| schedule | tokens | median wall s | measured savings | modeled savings |")
    print("| --- | --- | --- | --- | --- |")
    for name, config in configs.items():
        wall = statistics.median(walls[name])
        measured = 1 - wall / uniform
        modeled = plan_run(config).modeled_savings()
        print(
            f"| {name} | {tokens:,} | {wall:.1f} | {100 * measured:.1f}% | {100 * modeled:.1f}% |"
        )
    ff = "fixed-first K0=2 @0.67"
    ratio = (1 - statistics.median(walls[ff]) / uniform) / plan_run(configs[ff]).modeled_savings()
    print(f"\nmeasured / modeled savings: {ratio:.2f} (target >= 0.95)")


if __name__ == "__main__":
    main()
