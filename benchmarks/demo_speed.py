"""Benchmark: the demo (`fixedfirst bios`, what `make demo` runs) on this tree against another.

    .venv/bin/python benchmarks/demo_speed.py [--baseline main] [--rounds 2] [--preset default]
                                              [--keep DIR]

The baseline is any git revision (a branch, a tag, a commit): its `src/` is exported to a
temporary directory with `git archive` and run by the same Python. Each round runs both trees
once, each into a fresh output directory, alternating which goes first (A B, then B A, ...), so a
machine whose load drifts slows both alike; the demo's wall-clock is the whole command (start-up,
training, recall evaluation, figure and report). `--threads N` sets OMP_NUM_THREADS for both, to
compare the code at equal threads; without it each tree picks its own (torch's default, or
`train.threads`' choice from the free cores where the tree has it).

The results are compared too: the people, the budget, each run's steps and realised FLOPs, and
the recalled bits per person of every schedule at every budget fraction (the mean over serving
depths), so a speed-up that changed what the demo shows would be seen. `--keep DIR` keeps this
tree's last demo directory (figure, report, runs) as DIR, which must not exist yet.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def export_source(revision: str, into: Path) -> Path:
    """`src/` of `revision`, extracted under `into`."""
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", revision, "src"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def run_demo(src: Path, out: Path, preset: str, threads: int | None) -> float:
    env = {**os.environ, "PYTHONPATH": str(src)}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    command = [sys.executable, "-m", "fixedfirst", "bios", "--preset", preset, "--out", str(out)]
    t0 = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def recall_means(results: dict) -> dict[tuple[str, float], float]:
    """(schedule, budget fraction) -> recalled bits per person, mean over serving depths."""
    groups: dict[tuple[str, float], list[float]] = {}
    for r in results["recall"]:
        groups.setdefault((r["schedule"], r["budget_fraction"]), []).append(r["bits_per_person"])
    return {key: statistics.mean(values) for key, values in groups.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="main", help="git revision to compare against")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--preset", default="default")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--keep", type=Path, default=None, help="keep this tree's last demo here")
    args = parser.parse_args()
    if args.keep is not None and args.keep.exists():
        parser.error(f"--keep {args.keep} exists; give a new directory")
    with tempfile.TemporaryDirectory(prefix="demo-speed-") as tmp:
        trees = {
            f"baseline ({args.baseline})": export_source(args.baseline, Path(tmp) / "baseline"),
            "this tree": ROOT / "src",
        }
        seconds: dict[str, list[float]] = {name: [] for name in trees}
        results: dict[str, dict] = {}
        for r in range(args.rounds):
            order = list(trees) if r % 2 == 0 else list(reversed(trees))
            for name in order:
                out = Path(tmp) / f"out-{r}-{len(seconds[name])}-{name.split()[0]}"
                seconds[name].append(run_demo(trees[name], out, args.preset, args.threads))
                results[name] = json.loads((out / "results.json").read_text())
                print(f"round {r + 1}: {name}: {seconds[name][-1]:.0f} s", flush=True)
                if args.keep is not None and name == "this tree":
                    shutil.rmtree(args.keep, ignore_errors=True)
                    shutil.copytree(out, args.keep)
    base, ours = list(trees)
    threads = f"OMP_NUM_THREADS={args.threads}" if args.threads else "each tree's own choice"
    print(f"\npreset {args.preset}, {args.rounds} round(s), threads: {threads}\n")
    print("| tree | demo wall-clock s (median) | runs | training s | recall evaluation s |")
    print("| --- | --- | --- | --- | --- |")
    for name in trees:
        wall = results[name].get("wall_clock_s", {})
        print(
            f"| {name} | {statistics.median(seconds[name]):.0f} | "
            + ", ".join(f"{s:.0f}" for s in seconds[name])
            + f" | {wall.get('training_and_reuse', float('nan')):.0f} | "
            f"{wall.get('recall_evaluation', float('nan')):.0f} |"
        )
    ratio = statistics.median(seconds[base]) / statistics.median(seconds[ours])
    print(f"\nthis tree is {ratio:.2f}x as fast as the baseline (ratio of the medians)")
    a, b = results[base], results[ours]
    for key in ("people", "recall_people", "flop_budget", "depths"):
        print(f"{key}: baseline {a[key]}, this tree {b[key]}")
    print("\n| run | steps (baseline / this tree) | realised FLOPs (baseline / this tree) |")
    print("| --- | --- | --- |")
    for run in a["runs"]:
        ra, rb = a["runs"][run], b["runs"][run]
        print(f"| {run} | {ra['steps']} / {rb['steps']} | {ra['flops']:.4g} / {rb['flops']:.4g} |")
    print("\n| schedule | budget | bits (baseline) | bits (this tree) |")
    print("| --- | --- | --- | --- |")
    means_a, means_b = recall_means(a), recall_means(b)
    for key in sorted(means_a):
        theirs = means_b.get(key, float("nan"))
        print(f"| {key[0]} | {key[1]:.0%} | {means_a[key]:.2f} | {theirs:.2f} |")


if __name__ == "__main__":
    main()
