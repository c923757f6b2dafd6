"""Benchmark: bios recall with each person's shared prefix run once, against whole prompts.

    .venv/bin/python benchmarks/recall_prefix.py --run DEMO/runs/fixed-4 [--repeats 3]
                                                 [--threads N]

Every recall prompt of a person begins with `<bos>` and the name; `exact_match(...,
share_prefix=True)` (what the experiment runs) computes that prefix once per person at every
layer application and scores the 30 continuations against it (model/shared_prefix.py), where
`share_prefix=False` runs every prompt whole. Both are timed on the run's final checkpoint at
the experiment's serving depths, alternated, as medians; the answer tables must be identical.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from fixedfirst.config import load_config
from fixedfirst.data.registry import kind_options
from fixedfirst.model import LoopedTransformer
from fixedfirst.runs.directory import RunDir
from fixedfirst.studies.bios.experiment import ExperimentConfig, snapshot_checkpoint
from fixedfirst.tasks.bios.recall import build_prompts, exact_match, shared_prefix_length
from fixedfirst.tasks.bios.tokenizer import BiosTokenizer
from fixedfirst.tasks.bios.world import build_world


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="a bios run directory")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    config = load_config(RunDir(args.run).config_path)
    model = LoopedTransformer(config.model)
    checkpoint = snapshot_checkpoint(args.run, 1.0)
    checkpoint.load_model(model)
    world = build_world(kind_options(config), config.data.seed)
    prompts = build_prompts(world, BiosTokenizer.for_pools(world.pools))
    depths = ExperimentConfig().depths
    seconds: dict[bool, list[float]] = {True: [], False: []}
    tables = {}
    for _ in range(args.repeats):
        for share in (False, True):
            t0 = time.perf_counter()
            tables[share] = exact_match(model.eval(), prompts, depths, share_prefix=share)
            seconds[share].append(time.perf_counter() - t0)
    whole, shared = (statistics.median(seconds[s]) for s in (False, True))
    same = all(torch.equal(tables[True][d], tables[False][d]) for d in depths)
    tokens = int(prompts.lengths.sum())
    skip = shared_prefix_length(prompts)
    print(
        f"{args.run} step {checkpoint.step}: {prompts.people} people, {len(prompts.lengths)} "
        f"prompts, {tokens} tokens, shared prefix {skip} tokens per person; depths up to "
        f"{max(depths)}; {torch.get_num_threads()} thread(s), median of {args.repeats}\n"
    )
    print("| recall | median s | tokens through the model | time vs whole prompts |")
    print("| --- | --- | --- | --- |")
    continued = tokens - skip * len(prompts.lengths) + skip * prompts.people
    print(f"| whole prompts | {whole:.2f} | {tokens} | 1.00x |")
    print(f"| shared prefix | {shared:.2f} | {continued} | {shared / whole:.2f}x |")
    print(f"\nanswer tables identical at every depth: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
