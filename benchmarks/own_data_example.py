"""Benchmark: how long the own-data example takes, a quick setting beside a scaled-down one.

    .venv/bin/python benchmarks/own_data_example.py [--data data/pystdlib-byte] [--full]

The guide's example (docs/guides/own-data.md) trains with `fixedfirst train mine.toml --out
runs/mine --set train.tokens=2_000_000` and evaluates with `fixedfirst eval runs/mine --depths
1..16,32,64`. This runs those commands, as a user would (one process each, the default thread
choice), for:

- quick: `--set train.tokens=100_000 --set model.d_model=64`, a check that everything works;
- scaled: `--set train.tokens=300_000`, the example's model at 15% of its tokens;
- full (with `--full`): the example's 2,000,000 tokens.

It prints a table of wall-clock per command (the process, start to end), the run's own
training wall-clock (summary.json: the steps only) and the validation tokens eval scored (its
JSON), with the load average before and after,
since on a shared machine the same command takes longer. A run without `--full` ends with the
example's training time extrapolated from the scaled run by the ratio of their modeled FLOPs
(both runs' depths are known before they start, docs/design.md §3), said as an extrapolation.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fixedfirst.compute.plan import plan_budget
from fixedfirst.config import load_config

FIXEDFIRST = [sys.executable, "-m", "fixedfirst"]
SETTINGS = {
    "quick": ["train.tokens=100_000", "model.d_model=64"],
    "scaled": ["train.tokens=300_000"],
    "full": ["train.tokens=2_000_000"],
}
EVAL_DEPTHS = "1..16,32,64"


def timed(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/pystdlib-byte"))
    parser.add_argument("--full", action="store_true", help="also run the 2,000,000 tokens")
    args = parser.parse_args()
    names = ["quick", "scaled", *(["full"] if args.full else [])]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "mine.toml"
        config.write_text(
            f'[model]\nvocab_size = 257\n[data]\nkind = "tokens"\npath = "{args.data.resolve()}"\n'
        )
        for name in names:
            run = Path(tmp) / "runs" / name
            sets = [arg for s in SETTINGS[name] for arg in ("--set", s)]
            before = load()
            train = timed([*FIXEDFIRST, "train", str(config), "--out", str(run), *sets])
            evaluate = timed([*FIXEDFIRST, "eval", str(run), "--depths", EVAL_DEPTHS])
            summary = json.loads((run / "summary.json").read_text())
            (scored,) = [json.loads(p.read_text()) for p in run.glob("eval-step-*.json")]
            summary["scored_tokens"] = scored["scored_tokens"]
            rows.append((name, " ".join(sets), summary, train, evaluate, f"{before} -> {load()}"))
        budgets = {n: plan_budget(load_config(config, SETTINGS[n])).flops for n in SETTINGS}
    print(f"data {args.data}; {os.cpu_count()} CPU cores; seconds of wall-clock")
    print(
        "| setting | steps | tokens | modeled FLOPs | train | of it, the steps | threads "
        f"| eval at {EVAL_DEPTHS} | tokens eval scored | load average before -> after |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, sets, s, train, evaluate, loads in rows:
        print(
            f"| {name} (`{sets}`) | {s['steps']} | {s['tokens']:,} | {s['flops']:.3g} "
            f"| {train:.0f} | {s['wall']:.0f} | {s['threads']} | {evaluate:.0f} "
            f"| {s['scored_tokens']:,} | {loads} |"
        )
    if not args.full:
        scaled = next(r for r in rows if r[0] == "scaled")
        ratio = budgets["full"] / budgets["scaled"]
        steps, outside = scaled[2]["wall"], scaled[3] - scaled[2]["wall"]
        print(
            f"extrapolated, not measured: train.tokens=2_000_000 models {budgets['full']:.3g} "
            f"FLOPs, {ratio:.2f}x the scaled run's, so its steps would take about "
            f"{steps * ratio / 60:.0f} min at the scaled run's rate, plus the "
            f"{outside:.0f} s the scaled run spent outside its steps (start, evaluation at the "
            "end, checkpoints)"
        )


if __name__ == "__main__":
    main()
