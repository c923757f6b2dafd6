"""Benchmark: serving another looped model by depth (a transformers Inkling2Loop run) beside our
own: fixedfirst's decoding against transformers' own `generate`, depth-speculative decoding
against fixed depth, and the prompt and the new tokens at their own depths.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/any_loop_serving.py --inkling-run RUN
        [--run OUR_RUN] [--new-tokens 64] [--repeats 5] [--json FILE]

Prompts are the runs' validation text (batch 1, one prompt after another); every decoding is
greedy, and the methods of a table alternate within each repeat, so they are timed side by side;
tokens/s is from the median time over --repeats. The time is this process's CPU time when torch
runs one thread (--clock cpu, the default then: on a machine shared with other work, wall time
measures the neighbours as much as the decoding), else wall time (--clock wall).

1. fixedfirst against transformers (the Inkling2Loop run): at each --depths, `fixedfirst.serve`'s
   fixed-depth decoding (one step per token through the model's own cache, built for that depth:
   model/pass_cache.py) against `model.generate` of transformers with `loop_num_passes` set to
   the same depth (its own DynamicCache, no sampling, no early stop); the same tokens or not.
2. Depth-speculative decoding against fixed depth at the verify depth, for each DRAFT:N of
   --drafts (the Inkling2Loop run at --verify; our run, with --run, at --our-verify): tokens/s,
   speed-up, the share of drafts the verifier accepted, the same tokens or not. Inkling2Loop's
   verifier reruns the drafted tokens from the first pass (serve/speculative.py); ours starts from
   the draft's passes.
3. Prefill and decode at their own depths, each (PREFILL, DECODE) of --pairs (--our-pairs for
   ours) beside the same depth for both: the held-out NLL of the decoded positions (validation
   windows of the run's sequence length, the first half prefilled in one step at PREFILL, the
   second half decoded one position at a time at DECODE, teacher-forced: `serve.decoding.
   teacher_forced`), and tokens/s of generating --new-tokens after a prompt of half a window
   (the prefill's time included).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch

from fixedfirst.config.architectures import quiet_transformers
from fixedfirst.model.loss import next_token_loss
from fixedfirst.runs.opening import trained_source
from fixedfirst.runs.served import Served, load_served
from fixedfirst.serve.decoding import decode_steps, teacher_forced
from fixedfirst.serve.modes import FixedDepth, Speculated
from fixedfirst.serve.speculative import SpeculationStats

PROMPTS = 4


def validation(served: Served, windows: int) -> torch.Tensor:
    """(windows, seq_len) validation token windows of the run."""
    assert served.run is not None
    config = served.run.config
    source = trained_source(config, served.run.checkpoint.meta.get("data"))
    (batch,) = source.validation_batches(1, windows)
    return batch.inputs


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


def timed(methods: dict[str, Callable[[], torch.Tensor]], repeats: int, clock: Callable[[], float]):
    """Each method's tokens and median seconds, the methods alternating within each repeat."""
    times: dict[str, list[float]] = {name: [] for name in methods}
    tokens: dict[str, torch.Tensor] = {}
    for _ in range(repeats):
        for name, method in methods.items():
            start = clock()
            tokens[name] = method()
            times[name].append(clock() - start)
    return tokens, {name: statistics.median(t) for name, t in times.items()}


def ours(model, prompts: list[torch.Tensor], n: int, mode, stats=None) -> torch.Tensor:
    """fixedfirst's greedy tokens (prompts, n), one prompt after another."""
    out = []
    for prompt in prompts:
        steps = decode_steps(model, prompt[None], n, mode, stats=stats)
        out.append(torch.cat([token for token, _ in steps], 1))
    return torch.cat(out)


@torch.no_grad()
def theirs(model, prompts: list[torch.Tensor], n: int, depth: int) -> torch.Tensor:
    """transformers' `generate` of the Inkling2Loop network at `depth` passes (prompts, n)."""
    from transformers import GenerationConfig

    network = model.network
    model.handle.set_depth(depth)
    config = GenerationConfig(
        max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0, use_cache=True
    )
    out = []
    with quiet_transformers():
        for prompt in prompts:
            generated = network.generate(input_ids=prompt[None], generation_config=config)
            out.append(generated[:, prompt.numel() :])
    return torch.cat(out)


def against_transformers(
    model, prompts, n: int, depths: list[int], repeats: int, clock
) -> list[dict]:
    rows = []
    for depth in depths:
        methods = {
            "fixedfirst": lambda d=depth: ours(model, prompts, n, FixedDepth(d)),
            "transformers": lambda d=depth: theirs(model, prompts, n, d),
        }
        tokens, seconds = timed(methods, repeats, clock)
        count = tokens["fixedfirst"].numel()
        rows.append(
            {
                "depth": depth,
                "fixedfirst_tokens_per_s": count / seconds["fixedfirst"],
                "transformers_tokens_per_s": count / seconds["transformers"],
                "ratio": seconds["transformers"] / seconds["fixedfirst"],
                "same_tokens": torch.equal(tokens["fixedfirst"], tokens["transformers"]),
            }
        )
    return rows


def speculation(model, prompts, n: int, depth: int, drafts, repeats: int, clock) -> list[dict]:
    stats = {draft: SpeculationStats() for draft in drafts}
    methods = {"fixed": lambda: ours(model, prompts, n, FixedDepth(depth))}
    for draft in drafts:
        mode = Speculated(depth, draft[0], draft[1])
        methods[f"{draft[0]}:{draft[1]}"] = lambda m=mode, d=draft: ours(
            model, prompts, n, m, stats[d]
        )
    tokens, seconds = timed(methods, repeats, clock)
    count = tokens["fixed"].numel()
    rows = [{"decoding": f"fixed depth {depth}", "tokens_per_s": count / seconds["fixed"]}]
    for draft in drafts:
        name = f"{draft[0]}:{draft[1]}"
        rows.append(
            {
                "decoding": f"speculative {name}",
                "tokens_per_s": count / seconds[name],
                "speedup": seconds["fixed"] / seconds[name],
                "acceptance": stats[draft].acceptance_rate,
                "same_tokens": torch.equal(tokens[name], tokens["fixed"]),
            }
        )
    return rows


@torch.no_grad()
def decoded_nll(model, windows: torch.Tensor, mode: FixedDepth) -> float:
    """Mean NLL of the second half of each window, teacher-forced: the first half prefilled."""
    half = windows.shape[1] // 2
    logits, _ = teacher_forced(model, windows[:, :-1], mode, half)
    targets = windows[:, 1:].clone()
    targets[:, :half] = -100  # the prefilled positions are not scored
    return next_token_loss(logits, targets).item()


def prefill_pairs(model, windows, prompts, n: int, pairs, repeats: int, clock) -> list[dict]:
    depths = sorted({d for pair in pairs for d in pair})
    modes = {pair: FixedDepth(pair[1], prefill_depth=pair[0]) for pair in pairs}
    modes.update({(d, d): FixedDepth(d) for d in depths})
    methods = {pair: lambda m=mode: ours(model, prompts, n, m) for pair, mode in modes.items()}
    _, seconds = timed(methods, repeats, clock)
    count = len(prompts) * n
    rows = []
    for pair, mode in modes.items():
        rows.append(
            {
                "prefill": pair[0],
                "decode": pair[1],
                "nll": decoded_nll(model, windows, mode),
                "tokens_per_s": count / seconds[pair],
            }
        )
    return rows


def model_line(name: str, served: Served) -> str:
    total = sum(p.numel() for p in served.model.parameters())
    return f"{name}: {served.description}, {total / 1e6:.2f}M parameters"


def print_tables(results: dict, args) -> None:
    pct = lambda x: "" if x is None else f"{x:.0%}"  # noqa: E731
    yes = lambda x: "yes" if x else "NO"  # noqa: E731
    print(
        f"\n{PROMPTS} prompts of half a validation window, {args.new_tokens} new tokens each, "
        f"greedy, batch 1, median of {args.repeats}.\n"
    )
    print("fixedfirst's decoding against transformers' generate (Inkling2Loop):\n")
    print("| passes | fixedfirst tokens/s | transformers tokens/s | ratio | same tokens |")
    print("| --- | --- | --- | --- | --- |")
    for r in results["transformers"]:
        print(
            f"| {r['depth']} | {r['fixedfirst_tokens_per_s']:,.1f} | "
            f"{r['transformers_tokens_per_s']:,.1f} | {r['ratio']:.2f}x | "
            f"{yes(r['same_tokens'])} |"
        )
    for name, rows in results["speculation"].items():
        print(f"\nDepth-speculative decoding against fixed depth ({name}):\n")
        print("| decoding | tokens/s | speed-up | acceptance | same tokens |")
        print("| --- | --- | --- | --- | --- |")
        for r in rows:
            if "speedup" not in r:
                print(f"| {r['decoding']} | {r['tokens_per_s']:,.1f} | 1.00x |  |  |")
                continue
            slower = " (slower)" if r["speedup"] < 1 else ""
            print(
                f"| {r['decoding']} | {r['tokens_per_s']:,.1f} | {r['speedup']:.2f}x{slower} | "
                f"{pct(r['acceptance'])} | {yes(r['same_tokens'])} |"
            )
    for name, rows in results["pairs"].items():
        print(f"\nPrefill and decode at their own depths ({name}):\n")
        print("| prefill | decode | NLL of decoded positions | tokens/s |")
        print("| --- | --- | --- | --- |")
        for r in sorted(rows, key=lambda r: (-r["decode"], -r["prefill"])):
            print(f"| {r['prefill']} | {r['decode']} | {r['nll']:.4f} | {r['tokens_per_s']:,.1f} |")


def pairs_of(text: str) -> list[tuple[int, int]]:
    return [tuple(int(x) for x in p.split(":")) for p in text.split(",")]  # type: ignore[misc]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inkling-run", required=True, help="an Inkling2Loop run with text data")
    parser.add_argument("--run", help="a run of our own model, for sections 2 and 3")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--windows", type=int, default=8, help="validation windows for NLL")
    parser.add_argument("--depths", default="1,2,4", help="section 1's depths")
    parser.add_argument("--verify", type=int, default=4)
    parser.add_argument("--drafts", default="1:2,1:4,2:4,3:4")
    parser.add_argument("--our-verify", type=int, default=16)
    parser.add_argument("--our-drafts", default="1:4,1:8,2:8,4:8")
    parser.add_argument("--pairs", default="4:1,4:2,4:3,1:4,2:4")
    parser.add_argument("--our-pairs", default="16:2,16:4,16:8,4:16,2:16")
    parser.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
    parser.add_argument("--clock", choices=CLOCKS, help="cpu (one thread only) or wall")
    args = parser.parse_args()
    threads = torch.get_num_threads()
    args.clock = args.clock or ("cpu" if threads == 1 else "wall")
    if args.clock == "cpu" and threads != 1:
        parser.error(f"--clock cpu sums the CPU time of torch's {threads} threads; use wall")
    clock = CLOCKS[args.clock]

    inkling = load_served(args.inkling_run)
    served = {"Inkling2Loop": inkling}
    if args.run:
        served["ours"] = load_served(args.run)
    seconds = "CPU seconds of this process" if args.clock == "cpu" else "wall seconds"
    print(f"torch {torch.__version__}, {threads} thread(s); times in {seconds}")
    for name, one in served.items():
        print(model_line(name, one))
    windows = {name: validation(one, args.windows) for name, one in served.items()}
    prompts = {name: [w[: w.numel() // 2] for w in windows[name][:PROMPTS]] for name in windows}
    depths = [int(d) for d in args.depths.split(",")]
    results: dict = {
        "transformers": against_transformers(
            inkling.model, prompts["Inkling2Loop"], args.new_tokens, depths, args.repeats, clock
        ),
        "speculation": {},
        "pairs": {},
    }
    settings = {
        "Inkling2Loop": (args.verify, args.drafts, args.pairs),
        "ours": (args.our_verify, args.our_drafts, args.our_pairs),
    }
    for name, one in served.items():
        verify, drafts, pairs = settings[name]
        label = f"{name}, verify depth {verify}"
        results["speculation"][label] = speculation(
            one.model, prompts[name], args.new_tokens, verify, pairs_of(drafts), args.repeats, clock
        )
        results["pairs"][name] = prefill_pairs(
            one.model,
            windows[name],
            prompts[name],
            args.new_tokens,
            pairs_of(pairs),
            args.repeats,
            clock,
        )
    print_tables(results, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
