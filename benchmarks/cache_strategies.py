"""Benchmark: what each KV cache strategy (docs/design.md §19) costs and buys, side by side.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/cache_strategies.py --run RUN [--run RUN2 ...]
        [--slots 1,2,4] [--depths 4,16,32,64] [--out FILE.md] [--json FILE.json]

For every run (a language-model run on `tokens` data, or a chains-task run), every strategy
(full, bounded:S for each S of --slots; bounded:1 is `last`) and every serving depth:

1. Cache bytes per token: what a decoding session holds (keys and values, fp32) after a batch of
   validation rows, divided by the tokens; and its share of the full cache's.
2. Teacher-forced NLL through the cache: --rows validation rows decoded one token at a time
   (`serve.decoding.teacher_forced`, prefill 0), each position's target scored at that position;
   the difference to the full cache at the same depth. (The full cache's number equals one
   forward's, which the benchmark prints beside it as a check.)
3. Agreement with the full cache. Language model: greedy continuations (--new-tokens) of
   --prompts validation prefixes of 8-40 tokens, in left-padded batches of --batch; the share of
   prompts whose continuation equals the full cache's, and the mean share of tokens before the
   first difference. Chains: the task's labels are not the next inputs, so the argmax at every
   labelled position of --prompts evaluation sequences (teacher-forced, as in 2) against the
   full cache's, and the accuracy on those labels.
4. Tokens/s of greedy decoding, 8 prompts in one padded batch, every strategy and depth measured
   alternately within each of --repeats rounds; the median, and its ratio to the full cache's.

Models: pass any run directory; the committed table (docs/guides/serving-cache.md) names the
runs it used and the commands that trained them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import fixedfirst.tasks  # noqa: F401  (registers the chains data kind)
from fixedfirst.model import FULL_CACHE, BoundedCache, KVCache, parse_cache_strategy
from fixedfirst.model.kv_cache import entries_per_token
from fixedfirst.model.loss import IGNORE_INDEX
from fixedfirst.runs.opening import load_run
from fixedfirst.serve import FixedDepth, left_pad, teacher_forced

PROMPT_LENGTHS = (8, 12, 16, 20, 24, 28, 32, 40)


def strategies(slots: list[int]) -> list:
    return [FULL_CACHE, *(BoundedCache(s) for s in slots)]


@torch.no_grad()
def cache_bytes(model, rows: torch.Tensor, depth: int, strategy) -> float:
    cache = KVCache(strategy=strategy)
    model.decode_step(rows, depth, cache)
    return cache.nbytes / rows.numel()


@torch.no_grad()
def through_cache(model, inputs, targets, depth: int, strategy) -> tuple[float, torch.Tensor]:
    """(NLL per scored target, logits) of rows decoded one token at a time through the cache."""
    logits, _ = teacher_forced(model, inputs, FixedDepth(depth, cache_strategy=strategy))
    scored = targets != IGNORE_INDEX
    nll = F.cross_entropy(logits[scored].float(), targets[scored], reduction="mean")
    return float(nll), logits


@torch.no_grad()
def greedy(model, prompts: list[list[int]], n: int, depth: int, strategy, batch: int):
    out = []
    for i in range(0, len(prompts), batch):
        ids, pad = left_pad(prompts[i : i + batch])
        steps = model.stream(ids, n, depth, pad=pad, cache_strategy=strategy)
        out.append(torch.cat(list(steps), 1))
    return torch.cat(out)


def agreement(tokens: torch.Tensor, full: torch.Tensor) -> tuple[float, float]:
    """Share of rows equal to the full cache's; mean share of tokens before the first
    difference."""
    same = tokens == full
    before = same.long().cumprod(1).sum(1).float() / tokens.shape[1]
    return float(same.all(1).float().mean()), float(before.mean())


def measure_run(run: str, args) -> dict:
    from fixedfirst.data.registry import build_source

    loaded = load_run(run)
    model, config = loaded.model, loaded.config
    chains = config.data.kind == "chains"
    source = build_source(config)
    rows_per_batch = config.train.micro_batch()
    batches = source.validation_batches(-(-args.rows // rows_per_batch), rows_per_batch)
    inputs = torch.cat([b.inputs for b in batches])[: args.rows]
    targets = torch.cat([b.targets for b in batches])[: args.rows]
    kinds = strategies(args.slots)
    depths = args.depths
    result: dict = {
        "run": run,
        "step": loaded.checkpoint.step,
        "kind": config.data.kind,
        "parameters": model.parameter_counts()["total"],
        "layers": [config.model.n_prelude, config.model.n_core, config.model.n_coda],
        "rows": list(inputs.shape),
        "strategies": [s.name for s in kinds],
        "depths": depths,
        "bytes": {},
        "entries": {},
        "nll": {},
        "one_pass_nll": [],
        "agreement": {},
        "accuracy": {},
        "tokens_per_s": {},
    }
    for s in kinds:
        result["bytes"][s.name] = [cache_bytes(model, inputs[:4], d, s) for d in depths]
        result["entries"][s.name] = [entries_per_token(config.model, d, s) for d in depths]
    scored = targets != IGNORE_INDEX
    for depth in depths:
        with torch.no_grad():
            one_pass = model(inputs, depth)
        nll = F.cross_entropy(one_pass[scored].float(), targets[scored])
        result["one_pass_nll"].append(float(nll))
    if chains:
        from fixedfirst.data.registry import kind_options
        from fixedfirst.tasks.chains.bands import bands_of
        from fixedfirst.tasks.chains.source import evaluation_set

        options = kind_options(config)
        evaluation = evaluation_set(options, config.data.seed, args.prompts)
        labelled = evaluation.positions
        expected = evaluation.batch.targets.gather(1, labelled)
        bands = bands_of(options)
        result["bands"] = [b.label for b in bands]
    else:
        room = config.model.max_seq_len - args.new_tokens
        lengths = [min(n, room) for n in PROMPT_LENGTHS]
        prompts = [
            inputs[i % len(inputs), : lengths[i % len(lengths)]].tolist()
            for i in range(args.prompts)
        ]
    for depth in depths:
        reference = None
        for s in kinds:
            nll, _ = through_cache(model, inputs, targets, depth, s)
            result["nll"].setdefault(s.name, []).append(nll)
            if chains:
                _, logits = through_cache(
                    model, evaluation.batch.inputs, evaluation.batch.targets, depth, s
                )
                predicted = logits.argmax(-1).gather(1, labelled)
                if reference is None:
                    reference = predicted
                same = float((predicted == reference).float().mean())
                result["agreement"].setdefault(s.name, []).append([same, same])
                right = (predicted == expected).float()
                by_band = [float(right[:, b.low : b.high + 1].mean()) for b in bands]
                result["accuracy"].setdefault(s.name, []).append(by_band)
            else:
                tokens = greedy(model, prompts, args.new_tokens, depth, s, args.batch)
                if reference is None:
                    reference = tokens
                result["agreement"].setdefault(s.name, []).append(agreement(tokens, reference))
        print(f"  {run}: depth {depth} measured", flush=True)
    # speed: every (strategy, depth) once per round, alternated; medians over rounds
    room = config.model.max_seq_len - 8
    speed_prompts = [inputs[i, :8].tolist() for i in range(min(8, len(inputs)))]
    n = min(args.new_tokens, room)
    times: dict = {(s.name, d): [] for s in kinds for d in depths}
    for _ in range(args.repeats):
        for d in depths:
            for s in kinds:
                t0 = time.perf_counter()
                greedy(model, speed_prompts, n, d, s, 8)
                times[(s.name, d)].append(time.perf_counter() - t0)
    for s in kinds:
        result["tokens_per_s"][s.name] = [
            n * len(speed_prompts) / statistics.median(times[(s.name, d)]) for d in depths
        ]
    result["speed_setting"] = {"prompts": len(speed_prompts), "new_tokens": n}
    return result


def targets(r: dict) -> list[str]:
    """Issue 40's targets, checked on this run: bounded:4 at the deepest depth holds at most 1/8
    of the full cache's bytes; its NLL through the cache is within 1% of the full cache's at
    depths 16 and deeper; else the smallest S that is."""
    depths, lines = r["depths"], []
    deep = [k for k, d in enumerate(depths) if d >= 16]
    full = r["nll"]["full"]

    def within(name: str) -> bool:
        return all(r["nll"][name][k] / full[k] - 1 <= 0.01 for k in deep)

    if "bounded:4" in r["bytes"]:
        share = r["bytes"]["bounded:4"][-1] / r["bytes"]["full"][-1]
        changes = ", ".join(
            f"K={depths[k]} {r['nll']['bounded:4'][k] / full[k] - 1:+.2%}" for k in deep
        )
        lines.append(
            f"Targets: bounded:4 at K={depths[-1]} holds {share:.3f} of the full cache's bytes "
            f"(at most 0.125: {'yes' if share <= 0.125 else 'no'}); its NLL through the cache "
            f"against the full cache's: {changes} (within 1%: "
            f"{'yes' if within('bounded:4') else 'no'})."
        )
    bounded = [parse_cache_strategy(n) for n in r["strategies"] if n != "full"]
    passing = [b.size for b in sorted(bounded, key=lambda b: b.size) if within(b.name)]
    smallest = f"S = {passing[0]}" if passing else "none of those measured"
    lines.append(f"Smallest S within 1% of the full cache's NLL at K >= 16: {smallest}.")
    return lines


def markdown(results: list[dict], args) -> str:
    lines: list[str] = []
    add = lines.append
    for r in results:
        depths = r["depths"]
        heads = " | ".join(f"K={d}" for d in depths)
        rule = " --- |" * (len(depths) + 1)
        add(
            f"## {r['run']} (step {r['step']}, {r['kind']}, {r['parameters'] / 1e6:.2f}M "
            f"parameters, prelude/core/coda layers {'/'.join(map(str, r['layers']))})"
        )
        add("")
        add(
            f"Cache bytes per token (fp32 keys and values), and the share of the full cache's at "
            f"K={depths[-1]}:"
        )
        add("")
        add(f"| strategy | {heads} | of full at K={depths[-1]} |")
        add(f"| --- |{rule}")
        full = r["bytes"]["full"][-1]
        for name in r["strategies"]:
            cells = " | ".join(f"{b:,.0f}" for b in r["bytes"][name])
            add(f"| {name} | {cells} | {r['bytes'][name][-1] / full:.3f} |")
        add("")
        relative = r["kind"] != "chains"  # the chains model's NLL is near 0: nats there
        add(
            f"Teacher-forced NLL through the cache ({r['rows'][0]} validation rows of "
            f"{r['rows'][1]} tokens, one token at a time), and its difference to the full cache"
            f"{'' if relative else ' (nats)'}:"
        )
        add("")
        add(f"| strategy | {heads} |")
        add("| --- |" + " --- |" * len(depths))
        for name in r["strategies"]:
            cells = []
            for k, nll in enumerate(r["nll"][name]):
                base = r["nll"]["full"][k]
                change = f"{nll / base - 1:+.2%}" if relative else f"{nll - base:+.4f}"
                cells.append(f"{nll:.4f}" + ("" if name == "full" else f" ({change})"))
            add(f"| {name} | " + " | ".join(cells) + " |")
        one = " | ".join(f"{nll:.4f}" for nll in r["one_pass_nll"])
        add(f"| (one forward) | {one} |")
        add("")
        if r["kind"] == "chains":
            add(
                f"Argmax at the long chain's labels of {args.prompts} evaluation sequences "
                "(difficulty 0..32): agreement with the full cache:"
            )
            add("")
            add(f"| strategy | {heads} |")
            add("| --- |" + " --- |" * len(depths))
            for name in r["strategies"]:
                add(f"| {name} | " + " | ".join(f"{a[0]:.1%}" for a in r["agreement"][name]) + " |")
            add("")
            add(f"Accuracy at those labels by difficulty band ({' / '.join(r['bands'])}):")
            add("")
            add(f"| strategy | {heads} |")
            add("| --- |" + " --- |" * len(depths))
            for name in r["strategies"]:
                cells = [" / ".join(f"{x:.0%}" for x in acc) for acc in r["accuracy"][name]]
                add(f"| {name} | " + " | ".join(cells) + " |")
        else:
            add(
                f"Greedy agreement with the full cache ({args.prompts} prompts, "
                f"{args.new_tokens} new tokens): prompts identical / tokens before the first "
                "difference:"
            )
            add("")
            add(f"| strategy | {heads} |")
            add("| --- |" + " --- |" * len(depths))
            for name in r["strategies"]:
                cells = [f"{a:.1%} / {b:.1%}" for a, b in r["agreement"][name]]
                add(f"| {name} | " + " | ".join(cells) + " |")
        add("")
        for line in targets(r):
            add(line)
            add("")
        setting = r["speed_setting"]
        add(
            f"Greedy decoding, tokens/s ({setting['prompts']} prompts in one batch, "
            f"{setting['new_tokens']} new tokens, median of {args.repeats}, alternated), and the "
            "ratio to the full cache:"
        )
        add("")
        add(f"| strategy | {heads} |")
        add("| --- |" + " --- |" * len(depths))
        for name in r["strategies"]:
            cells = []
            for k, rate in enumerate(r["tokens_per_s"][name]):
                base = r["tokens_per_s"]["full"][k]
                cells.append(f"{rate:,.0f}" + ("" if name == "full" else f" ({rate / base:.2f}x)"))
            add(f"| {name} | " + " | ".join(cells) + " |")
        add("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="append", default=[], help="a run directory")
    parser.add_argument("--slots", default="1,2,4", help="S of the bounded strategies")
    parser.add_argument("--depths", default="4,16,32,64", help="serving depths")
    parser.add_argument("--rows", type=int, default=16, help="validation rows of the NLL")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--batch", type=int, default=32, help="prompts per batch of section 3")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", metavar="FILE.md", help="also write the tables here")
    parser.add_argument("--json", metavar="FILE.json", help="also write the numbers as JSON")
    parser.add_argument(
        "--from-json", metavar="FILE.json", help="print the tables of an earlier run's --json"
    )
    args = parser.parse_args()
    args.slots = [int(s) for s in args.slots.split(",")]
    args.depths = [int(d) for d in args.depths.split(",")]
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        for key, value in saved["settings"].items():
            setattr(args, key, value)
        results = saved["runs"]
    else:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)", flush=True)
        results = [measure_run(run, args) for run in args.run]
    text = markdown(results, args)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    if args.json:
        settings = {k: getattr(args, k) for k in ("prompts", "new_tokens", "repeats", "batch")}
        saved = {"settings": settings, "torch": torch.__version__, "runs": results}
        Path(args.json).write_text(json.dumps(saved, indent=2) + "\n")


if __name__ == "__main__":
    main()
