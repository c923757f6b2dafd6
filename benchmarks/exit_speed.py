"""Benchmark: does batched exit keep its speed? Each exit rule decoding one batch against
fixed-depth decoding at ceil(its mean depth), measured side by side.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/exit_speed.py --run RUN [--run RUN2 ...]
        [--rules kl:1e-2,...] [--rows 8] [--new-tokens 32] [--repeats 5] [--json FILE]

For each run: --rows held-out prompts (validation rows of a text run, evaluation sequences of a
chains run, as `fixedfirst frontier` draws them, cut to at most 16 tokens), decoded greedily as
one batch, --new-tokens each, under each rule at each threshold (max depth: the deepest depth
the run trained at). d is the mean depth of that decoding; fixed-depth decoding at ceil(d) of the
same prompts is timed in the same rounds (`fixedfirst.serve.frontier.measure_speed`: every mode
once per round, in turn; the median of --repeats rounds). The bar: at mean depth d,
batched exit decodes at least 0.8x the tokens per second of fixed depth ceil(d).

Two columns say where the time goes. "Lock step": the mean over decoding steps of the deepest
row's depth, what a batch iterates per token (a step runs until its last row stops). "Ops per
token": torch operations per batch token (one token for every row), counted by torch.profiler
in one more decoding of each mode (a small model's step on a CPU costs per operation).
"""

from __future__ import annotations

import argparse
import collections
import json
import math

import torch
from torch.profiler import ProfilerActivity, profile

from fixedfirst.serve import Adaptive, FixedDepth, decode_steps, exit_rule, left_pad
from fixedfirst.serve.frontier import SpeedSettings, label, measure_speed, speed_prompts
from fixedfirst.studies.serving.frontier import FrontierSettings, open_subject

RULES = "kl:1e-2,kl:1e-3,entropy:1e-1,entropy:1e-2,state:1e-1,state:3e-2,argmax:2,argmax:3"


def depths_of(model, prompts, n: int, mode) -> torch.Tensor:
    ids, pad = left_pad(prompts)
    return torch.stack([d for _, d in decode_steps(model, ids, n, mode, pad)], 1).float()


def ops_per_token(model, prompts, n: int, mode) -> float:
    """Top-level torch operations of one decoding, per batch token."""
    ids, pad = left_pad(prompts)
    with profile(activities=[ProfilerActivity.CPU]) as p:
        for _ in decode_steps(model, ids, n, mode, pad):
            pass
    top = [e for e in p.events() if e.cpu_parent is None]
    return len(top) / n


def run_table(path: str, rules: list[str], rows: int, n: int, repeats: int) -> dict:
    subject = open_subject(path, FrontierSettings(rows=max(2, rows), sequences=max(2, rows)))
    model = subject.model
    prompts, n = speed_prompts(subject.scorer.batches, rows, model.config.max_seq_len, n)
    modes = []
    for spec in rules:
        name, _, threshold = spec.partition(":")
        modes.append(Adaptive(exit_rule(name, float(threshold), subject.trained_depth)))
    depths = [depths_of(model, prompts, n, m) for m in modes]
    ceilings = sorted({math.ceil(float(d.mean()) - 1e-9) for d in depths})
    fixed = [FixedDepth(c) for c in ceilings]
    speeds = measure_speed(model, prompts, modes + fixed, SpeedSettings(len(prompts), n, repeats))
    rate = {m.depth: s.tokens_per_s for m, s in zip(fixed, speeds[len(modes) :], strict=True)}
    fixed_ops = {m.depth: ops_per_token(model, prompts, n, m) for m in fixed}
    table = []
    for mode, d, s in zip(modes, depths, speeds[: len(modes)], strict=True):
        ceiling = math.ceil(s.mean_depth - 1e-9)
        table.append(
            {
                "rule": label(mode),
                "mean_depth": s.mean_depth,
                "lock_step_depth": float(d.max(0).values.mean()),
                "tokens_per_s": s.tokens_per_s,
                "ops_per_token": ops_per_token(model, prompts, n, mode),
                "fixed_depth": ceiling,
                "fixed_tokens_per_s": rate[ceiling],
                "fixed_ops_per_token": fixed_ops[ceiling],
                "ratio": s.tokens_per_s / rate[ceiling],
            }
        )
    return {
        "run": path,
        "about": subject.about,
        "prompts": len(prompts),
        "prompt_tokens": len(prompts[0]),
        "new_tokens": n,
        "repeats": repeats,
        "threads": torch.get_num_threads(),
        "rows": table,
    }


def print_table(result: dict) -> None:
    about = result["about"]
    print(
        f"\n{result['run']} (step {about['step']}, {about['schedule']}): {result['prompts']} "
        f"prompts of {result['prompt_tokens']} tokens in one batch, {result['new_tokens']} greedy "
        f"tokens each, median of {result['repeats']} rounds, {result['threads']} thread(s):\n"
    )
    print(
        "| rule | mean depth d | lock step | tokens/s | ops/token | fixed ⌈d⌉ | tokens/s | "
        "ops/token | ratio |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in result["rows"]:
        print(
            f"| {r['rule']} | {r['mean_depth']:.2f} | {r['lock_step_depth']:.2f} | "
            f"{r['tokens_per_s']:,.1f} | {r['ops_per_token']:.0f} | {r['fixed_depth']} | "
            f"{r['fixed_tokens_per_s']:,.1f} | {r['fixed_ops_per_token']:.0f} | "
            f"{r['ratio']:.2f}x |"
        )
    met = sum(r["ratio"] >= 0.8 for r in result["rows"])
    print(f"\n{met} of {len(result['rows'])} rule settings reach 0.8x of fixed depth ceil(d).")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="append", required=True, help="a run (repeatable)")
    parser.add_argument("--rules", default=RULES, help="RULE:THRESHOLD,... (default: %(default)s)")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
    args = parser.parse_args()
    results = []
    for path in args.run:
        result = run_table(path, args.rules.split(","), args.rows, args.new_tokens, args.repeats)
        print_table(result)
        results.append(result)
    counts = collections.Counter(r["ratio"] >= 0.8 for res in results for r in res["rows"])
    print(f"\nIn all: {counts[True]} of {sum(counts.values())} at or above 0.8x.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
