"""Benchmark: cached generation against recomputation, and KL exit against fixed depths.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/generation.py --run RUN [--json FILE]

Two tables, on the validation text of a language-model run (a run on `tokens` data):

1. Generation speed at depths 4 and 16. Cached: `model.stream` with a per-iteration KV cache, one
   new position per step. Recomputation: every step runs the whole sequence again at the same
   depth (no cache) and takes the last position's argmax. Both greedy, from the same prompts
   (the first --prompt-tokens tokens of validation rows), --new-tokens each; they must produce
   the same tokens. Medians over --repeats, the two measured alternately in one run; the ratio
   is median(recompute) / median(cached).

2. KL exit against fixed depths, teacher-forced over --batches validation batches: every
   position is decoded under the rule (`teacher_forced_kl_exit`: positions stop at their own
   depth, deeper cache entries copy their last iteration), the log-prob of the true next token is
   read at the depth that position stopped at; fixed depths read it at that depth
   (`nll_by_depth`). Mean depth is over all scored positions. Modeled forward FLOPs per token
   (compute.flop_model at the rows' length): prelude + K*iteration + readout at fixed K, and
   prelude + k*(iteration + readout) for a token that stops at k, because the rule reads out at
   every iteration.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from fixedfirst.compute.flops import flop_model
from fixedfirst.model.loss import IGNORE_INDEX
from fixedfirst.runs.opening import load_run
from fixedfirst.serve import Adaptive, KLExit, teacher_forced_kl_exit


def validation_batches(loaded, n_batches: int):
    from fixedfirst.data.registry import build_source

    source = build_source(loaded.config)
    state = loaded.checkpoint.meta.get("data")
    if state is not None:
        source.load_state_dict(state)
    return source.validation_batches(n_batches, loaded.config.train.micro_batch())


@torch.no_grad()
def recompute_generate(model, prompt: torch.Tensor, n: int, depth: int) -> torch.Tensor:
    seq = prompt
    for _ in range(n):
        token = model(seq, depth)[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, token], 1)
    return seq[:, prompt.shape[1] :]


def cached_generate(model, prompt: torch.Tensor, n: int, depth: int) -> torch.Tensor:
    return torch.cat(list(model.stream(prompt, n, depth)), 1)


def speed_table(model, prompts: torch.Tensor, n: int, depths: list[int], repeats: int) -> list:
    rows = []
    for depth in depths:
        same = torch.equal(
            cached_generate(model, prompts, n, depth), recompute_generate(model, prompts, n, depth)
        )
        times: dict[str, list[float]] = {"cached": [], "recompute": []}
        for _ in range(repeats):
            for name, fn in (("cached", cached_generate), ("recompute", recompute_generate)):
                t0 = time.perf_counter()
                fn(model, prompts, n, depth)
                times[name].append(time.perf_counter() - t0)
        tokens = prompts.shape[0] * n
        cached, recompute = (statistics.median(times[k]) for k in ("cached", "recompute"))
        rows.append(
            {
                "depth": depth,
                "cached_tokens_per_s": tokens / cached,
                "recompute_tokens_per_s": tokens / recompute,
                "speedup": recompute / cached,
                "same_tokens": same,
            }
        )
    return rows


@torch.no_grad()
def exit_table(model, batches, thresholds: list[float], depths: list[int], max_depth: int) -> list:
    seq_len = batches[0].inputs.shape[1]
    flops = flop_model(model.config, seq_len)
    rows = []
    fixed_sums = dict.fromkeys(depths, 0.0)
    count = 0
    for batch in batches:
        scored = batch.targets != IGNORE_INDEX
        n = int(scored.sum())
        count += n
        for depth, nll in model.nll_by_depth(batch.inputs, batch.targets, depths).items():
            fixed_sums[depth] += nll * n
    for depth in depths:
        rows.append(
            {
                "serving": f"fixed K={depth}",
                "mean_depth": float(depth),
                "nll": fixed_sums[depth] / count,
                "gflops_per_token": flops.forward(depth) / 1e9,
            }
        )
    for threshold in thresholds:
        rule = KLExit(threshold, max_depth)
        nll_sum = depth_sum = 0.0
        t0 = time.perf_counter()
        for batch in batches:
            logits, used = teacher_forced_kl_exit(model, batch.inputs, Adaptive(rule))
            scored = batch.targets != IGNORE_INDEX
            nll = F.cross_entropy(
                logits.flatten(0, 1).float(), batch.targets.flatten(), reduction="none"
            )
            nll_sum += float(nll[scored.flatten()].sum())
            depth_sum += float(used[scored].sum())
        mean_depth = depth_sum / count
        rows.append(
            {
                "serving": f"KL exit {threshold:g} (max {max_depth})",
                "mean_depth": mean_depth,
                "nll": nll_sum / count,
                "gflops_per_token": (flops.prelude + mean_depth * (flops.iteration + flops.readout))
                / 1e9,
                "seconds": time.perf_counter() - t0,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="a language-model run directory")
    parser.add_argument("--checkpoint", type=int, help="default: the newest")
    parser.add_argument("--batches", type=int, help="validation batches (default: eval.batches)")
    parser.add_argument("--thresholds", default="1e-2,1e-3,1e-4")
    parser.add_argument("--depths", default="1,2,4,8,16", help="fixed depths to compare with")
    parser.add_argument("--max-depth", type=int, default=16)
    parser.add_argument("--speed-depths", default="4,16")
    parser.add_argument("--prompts", type=int, default=4, help="prompts generated side by side")
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
    args = parser.parse_args()

    loaded = load_run(args.run, args.checkpoint)
    model = loaded.model
    batches = validation_batches(loaded, args.batches or loaded.config.eval.batches)
    inputs = torch.cat([b.inputs for b in batches])
    prompts = inputs[: args.prompts, : args.prompt_tokens]
    counts = model.parameter_counts()
    print(
        f"{args.run} step {loaded.checkpoint.step}: {counts['total'] / 1e6:.2f}M parameters, "
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)"
    )

    speed = speed_table(
        model,
        prompts,
        args.new_tokens,
        [int(d) for d in args.speed_depths.split(",")],
        args.repeats,
    )
    print(
        f"\nGreedy generation, {prompts.shape[0]} prompts x {args.prompt_tokens} tokens, "
        f"{args.new_tokens} new tokens each, median of {args.repeats}:\n"
    )
    print("| depth | cached tokens/s | recompute tokens/s | speedup | same tokens |")
    print("| --- | --- | --- | --- | --- |")
    for r in speed:
        print(
            f"| {r['depth']} | {r['cached_tokens_per_s']:.1f} | {r['recompute_tokens_per_s']:.1f}"
            f" | {r['speedup']:.2f}x | {'yes' if r['same_tokens'] else 'NO'} |"
        )

    exits = exit_table(
        model,
        batches,
        [float(t) for t in args.thresholds.split(",")],
        [int(d) for d in args.depths.split(",")],
        args.max_depth,
    )
    tokens = sum(int((b.targets != IGNORE_INDEX).sum()) for b in batches)
    print(f"\nTeacher-forced validation NLL over {tokens:,} tokens ({len(batches)} batches):\n")
    print("| serving | mean depth | NLL (nats/token) | modeled GFLOPs/token |")
    print("| --- | --- | --- | --- |")
    for r in exits:
        print(
            f"| {r['serving']} | {r['mean_depth']:.2f} | {r['nll']:.4f} | "
            f"{r['gflops_per_token']:.4f} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"run": args.run, "step": loaded.checkpoint.step, "speed": speed, "exit": exits},
                f,
                indent=2,
            )


if __name__ == "__main__":
    main()
