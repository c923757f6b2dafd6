"""Benchmark: serving a trained run: plain, depth-speculative and batched decoding, and exit rules.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/serving.py --run RUN [--chains-run RUN2]
        [--cache STRATEGY] [--json FILE]

Every decoding below goes through the --cache strategy (full by default; docs/design.md §19).
Depth-speculative decoding needs one that keeps every iteration up to the serving depth, so under
another its rows are left out. benchmarks/cache_strategies.py compares the strategies themselves.

1. Decoding speed at serving depths 4 and 16, batch sizes 1 and 8. Eight prompts (validation
   text, 8 to 36 tokens long, so a batch is padded), --new-tokens greedy tokens each. Batch 1
   decodes them one after another, batch 8 as one left-padded batch. Methods: plain cached
   decoding (`model.stream`), depth-speculative decoding at each --drafts D:N with the verifier
   reusing the draft's first D iterations, and the same without reuse (the verifier recomputes
   the drafted tokens from the prelude up). Every method's tokens are compared with plain
   decoding of each prompt alone. Methods alternate within each repeat; tokens/s is from the
   median over --repeats. Acceptance: the share of draft tokens the verifier agreed with;
   reused iterations: the share of the verifier's token-iterations taken from the draft.
2. Exit rules in batches: each rule at its default threshold, batch 1 against batch 8 (rows stop
   on their own; a stopped row is not iterated), tokens/s and mean depth, same tokens as alone.
3. Exit rules against fixed depths, teacher-forced on the run's validation batches (every position
   decoded under the rule): mean depth, NLL, modeled forward FLOPs per token (a rule that reads
   out pays a readout per iteration; the state rule one readout), each against fixed depth 16.
   Measured by the exit frontier's code (`fixedfirst.serve.frontier`, `fixedfirst frontier`).
4. With --chains-run, a chains-task run: accuracy and mean depth per difficulty band for fixed
   depths and each rule (teacher-forced over the evaluation set, scored by the frontier's chains
   scorer): do harder labels take more iterations?

benchmarks/exit_speed.py compares batched exit with fixed-depth decoding at ceil(mean depth).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from fixedfirst.model import FULL_CACHE, parse_cache_strategy
from fixedfirst.runs.opening import load_run
from fixedfirst.serve import (
    Adaptive,
    FixedDepth,
    Speculated,
    exit_rule,
    left_pad,
    stream_adaptive,
)
from fixedfirst.serve.frontier import NextTokenNLL, frontier_points, label, measure_quality
from fixedfirst.serve.speculative import SpeculationStats, stream_speculative

PROMPT_LENGTHS = [8, 12, 16, 20, 24, 28, 32, 36]


def validation_batches(loaded, n_batches: int):
    from fixedfirst.data.registry import build_source

    source = build_source(loaded.config)
    return source.validation_batches(n_batches, loaded.config.train.micro_batch())


CACHE = FULL_CACHE
"""The strategy every decoding goes through (--cache)."""


def decode(model, prompts: list[list[int]], batch: int, n: int, depth: int, draft=None, reuse=True):
    """Greedy tokens (len(prompts), n) decoded `batch` prompts at a time; speculation stats."""
    stats = SpeculationStats()
    out = []
    for i in range(0, len(prompts), batch):
        ids, pad = left_pad(prompts[i : i + batch])
        if draft is None:
            steps = model.stream(ids, n, depth, pad=pad, cache_strategy=CACHE)
        else:
            mode = Speculated(depth, draft[0], draft[1], CACHE)
            steps = stream_speculative(model, ids, n, mode, pad, stats, reuse)
        out.append(torch.cat(list(steps), 1))
    return torch.cat(out), stats


def speed_table(model, prompts, n: int, depths, drafts, repeats: int) -> list[dict]:
    rows = []
    for depth in depths:
        alone, _ = decode(model, prompts, 1, n, depth)
        methods = [("plain", None, True)]
        for d in drafts if CACHE.keeps_every_iteration(depth) else ():
            if d[0] < depth:
                methods += [(f"speculative {d[0]}:{d[1]}", d, True)]
                methods += [(f"speculative {d[0]}:{d[1]}, no reuse", d, False)]
        times = {(m[0], b): [] for m in methods for b in (1, 8)}
        results = {}
        for _ in range(repeats):
            for name, draft, reuse in methods:
                for batch in (1, 8):
                    t0 = time.perf_counter()
                    tokens, stats = decode(model, prompts, batch, n, depth, draft, reuse)
                    times[(name, batch)].append(time.perf_counter() - t0)
                    results[(name, batch)] = (tokens, stats)
        for name, draft, _ in methods:
            for batch in (1, 8):
                tokens, stats = results[(name, batch)]
                seconds = statistics.median(times[(name, batch)])
                plain = statistics.median(times[("plain", batch)])
                iterations = stats.reused_iterations + stats.verified_iterations
                rows.append(
                    {
                        "depth": depth,
                        "batch": batch,
                        "method": name,
                        "tokens_per_s": tokens.numel() / seconds,
                        "vs_plain": plain / seconds,
                        "acceptance": stats.acceptance_rate if draft else None,
                        "reused_share": stats.reused_iterations / iterations if draft else None,
                        "same_tokens": torch.equal(tokens, alone),
                        "seconds": seconds,
                    }
                )
    return rows


def adaptive_decode(model, prompts, batch: int, n: int, rule):
    """Tokens and depths (len(prompts), n) under `rule`, `batch` prompts at a time."""
    tokens, depths = [], []
    for i in range(0, len(prompts), batch):
        ids, pad = left_pad(prompts[i : i + batch])
        steps = list(stream_adaptive(model, ids, n, Adaptive(rule, cache_strategy=CACHE), pad))
        tokens.append(torch.cat([t for t, _ in steps], 1))
        depths.append(torch.stack([d for _, d in steps], 1))
    return torch.cat(tokens), torch.cat(depths)


def adaptive_speed(model, prompts, n: int, rules, repeats: int) -> list[dict]:
    rows = []
    for rule in rules:
        times: dict[int, list[float]] = {1: [], 8: []}
        out = {}
        for _ in range(repeats):
            for batch in (1, 8):
                t0 = time.perf_counter()
                out[batch] = adaptive_decode(model, prompts, batch, n, rule)
                times[batch].append(time.perf_counter() - t0)
        tokens = out[1][0].numel()
        one, eight = (statistics.median(times[b]) for b in (1, 8))
        depths = out[8][1].float()  # (8, n): one batch of 8 rows
        # A batch that iterated every row until its deepest row stopped would run 8 x the
        # deepest depth at every step; ours runs each row's own depth.
        lockstep = float(depths.max(0).values.sum() * depths.shape[0])
        rows.append(
            {
                "rule": rule.describe(),
                "mean_depth": float(depths.mean()),
                "iterations_saved": 1 - float(depths.sum()) / lockstep,
                "batch1_tokens_per_s": tokens / one,
                "batch8_tokens_per_s": tokens / eight,
                "ratio": one / eight,
                "same_tokens": torch.equal(out[1][0], out[8][0])
                and torch.equal(out[1][1], out[8][1]),
            }
        )
    return rows


def exit_table(model, batches, rules, depths: list[int]) -> list[dict]:
    """Teacher-forced NLL, mean depth and modeled GFLOPs of fixed depths and each rule: the exit
    frontier's measurement (`fixedfirst.serve.frontier`) through the --cache strategy."""
    modes = [FixedDepth(d, cache_strategy=CACHE) for d in depths]
    modes += [Adaptive(rule, cache_strategy=CACHE) for rule in rules]
    scored = measure_quality(model, NextTokenNLL(batches), modes)
    rows = [{**p, "nll": p["quality"]} for p in frontier_points(model, modes, scored, None)]
    deep = next(r for r in rows if r["serving"] == f"fixed K={max(depths)}")
    for r in rows:
        r["nll_vs_deepest"] = r["nll"] / deep["nll"] - 1
        r["flops_vs_deepest"] = r["gflops"] / deep["gflops"]
    return rows


@torch.no_grad()
def chains_table(run: str, rules, depths: list[int], sequences: int) -> tuple[list, list[str]]:
    from fixedfirst.data.registry import kind_options
    from fixedfirst.tasks.chains.accuracy import ExitAccuracy
    from fixedfirst.tasks.chains.bands import bands_of
    from fixedfirst.tasks.chains.source import evaluation_set

    loaded = load_run(run)
    model, options = loaded.model, kind_options(loaded.config)
    evaluation = evaluation_set(options, loaded.config.data.seed, sequences)
    bands = bands_of(options)
    modes = [FixedDepth(d, cache_strategy=CACHE) for d in depths]
    modes += [Adaptive(rule, cache_strategy=CACHE) for rule in rules]
    scored = measure_quality(model, ExitAccuracy(evaluation, options), modes)
    rows = []
    for mode, point in zip(modes, scored, strict=True):
        cells = [point.details["bands"][b.label] for b in bands]
        rows.append(
            {
                "serving": label(mode),
                "accuracy": [c["accuracy"] for c in cells],
                "depth": [c["mean_depth"] for c in cells],
            }
        )
    return rows, [b.label for b in bands]


def parse_rules(text: str, max_depth: int):
    rules = []
    for part in text.split(","):
        name, _, threshold = part.partition(":")
        rules.append(exit_rule(name, float(threshold) if threshold else None, max_depth))
    return rules


def print_tables(speed, adaptive, exits, chains, prompts, args) -> None:
    print(
        f"\n{len(prompts)} prompts of {min(map(len, prompts))}-{max(map(len, prompts))} tokens, "
        f"{args.new_tokens} new tokens each, greedy, median of {args.repeats}:\n"
    )
    print(
        "| depth | batch | decoding | tokens/s | vs plain | acceptance | reused "
        "iterations | same tokens |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    pct = lambda x: "" if x is None else f"{x:.0%}"  # noqa: E731
    for r in speed:
        print(
            f"| {r['depth']} | {r['batch']} | {r['method']} | {r['tokens_per_s']:,.1f} | "
            f"{r['vs_plain']:.2f}x | {pct(r['acceptance'])} | "
            f"{pct(r['reused_share'])} | {'yes' if r['same_tokens'] else 'NO'} |"
        )
    print()
    for depth in sorted({r["depth"] for r in speed}):
        rate = {
            r["batch"]: r["tokens_per_s"]
            for r in speed
            if r["depth"] == depth and r["method"] == "plain"
        }
        print(
            f"Depth {depth}: one batch of 8 decodes {rate[8] / rate[1]:.2f}x the tokens/s of 8 "
            "sequential decodes (plain)."
        )
    print("\nExit rules in batches (max depth 16):\n")
    print(
        "| rule | mean depth | row-iterations saved vs lock step | batch 1 tokens/s | "
        "batch 8 tokens/s | ratio | same tokens |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in adaptive:
        print(
            f"| {r['rule']} | {r['mean_depth']:.2f} | {r['iterations_saved']:.0%} | "
            f"{r['batch1_tokens_per_s']:,.1f} | {r['batch8_tokens_per_s']:,.1f} | "
            f"{r['ratio']:.2f}x | {'yes' if r['same_tokens'] else 'NO'} |"
        )
    print("\nTeacher-forced validation NLL:\n")
    print("| serving | mean depth | NLL | vs K=16 | GFLOPs/token | of K=16's |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in exits:
        print(
            f"| {r['serving']} | {r['mean_depth']:.2f} | {r['nll']:.4f} | "
            f"{r['nll_vs_deepest']:+.2%} | {r['gflops']:.4f} | {r['flops_vs_deepest']:.0%} |"
        )
    if chains:
        rows, bands = chains
        print("\nChains: accuracy / mean depth per difficulty band (operations):\n")
        print("| serving | " + " | ".join(bands) + " |")
        print("| --- |" + " --- |" * len(bands))
        for r in rows:
            cells = [f"{a:.2f} / {d:.2f}" for a, d in zip(r["accuracy"], r["depth"], strict=True)]
            print(f"| {r['serving']} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="a language-model run directory")
    parser.add_argument("--chains-run", help="a chains-task run (section 4)")
    parser.add_argument("--batches", type=int, help="validation batches (default: eval.batches)")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--depths", default="4,16", help="serving depths of the speed table")
    parser.add_argument("--drafts", default="1:4,1:8,2:8", help="DRAFT_DEPTH:N settings")
    parser.add_argument(
        "--rules",
        default="kl:1e-2,kl:1e-3,entropy:1e-1,entropy:1e-2,state:1e-1,state:3e-2,state:1e-2,"
        "argmax:2,argmax:3",
        help="exit rules of the NLL table, RULE:THRESHOLD",
    )
    parser.add_argument("--chains-sequences", type=int, default=256)
    parser.add_argument("--cache", default="full", help="the KV cache strategy (default full)")
    parser.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
    args = parser.parse_args()
    global CACHE
    CACHE = parse_cache_strategy(args.cache)

    loaded = load_run(args.run)
    model = loaded.model
    batches = validation_batches(loaded, args.batches or loaded.config.eval.batches)
    inputs = torch.cat([b.inputs for b in batches])
    prompts = [inputs[i, :n].tolist() for i, n in enumerate(PROMPT_LENGTHS)]
    print(
        f"{args.run} step {loaded.checkpoint.step}: "
        f"{model.parameter_counts()['total'] / 1e6:.2f}M parameters, torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s)"
    )
    depths = [int(d) for d in args.depths.split(",")]
    drafts = [tuple(int(x) for x in d.split(":")) for d in args.drafts.split(",")]
    speed = speed_table(model, prompts, args.new_tokens, depths, drafts, args.repeats)
    defaults = [exit_rule(name, None, 16) for name in ("kl", "entropy", "state", "argmax")]
    adaptive = adaptive_speed(model, prompts, args.new_tokens, defaults, max(1, args.repeats // 2))
    exits = exit_table(model, batches, parse_rules(args.rules, 16), [1, 2, 4, 8, 16])
    chains = None
    if args.chains_run:
        chains = chains_table(
            args.chains_run,
            parse_rules(args.rules, 32),
            [1, 2, 4, 8, 16, 32],
            args.chains_sequences,
        )
    print_tables(speed, adaptive, exits, chains, prompts, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "run": args.run,
                    "speed": speed,
                    "adaptive": adaptive,
                    "exit": exits,
                    "chains": chains,
                },
                f,
                indent=2,
            )


if __name__ == "__main__":
    main()
