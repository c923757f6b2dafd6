"""Benchmark: the demo (`fixedfirst bios`, what `make demo` runs) on this tree against another.

    .venv/bin/python benchmarks/demo_speed.py [--baseline main] [--rounds 2] [--preset default]
                                              [--keep DIR] [--also "ARGS" ...]

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

`--also "ARGS"` (repeatable) adds this tree run with more `fixedfirst bios` arguments as one more
program of every round, e.g. `--also "--jobs 1"` to see what running side by side gains, or
`--also "--jobs 1 --set train.precision=fp32"` for the demo without either.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from math import nan
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


def run_demo(src: Path, extra: list[str], out: Path, preset: str, threads: int | None) -> float:
    env = {**os.environ, "PYTHONPATH": str(src)}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    command = [sys.executable, "-m", "fixedfirst", "bios", "--preset", preset, "--out", str(out)]
    command += extra
    t0 = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def recall_means(results: dict) -> dict[tuple[str, float], float]:
    """(schedule, budget fraction) -> recalled bits per person, mean over serving depths."""
    groups: dict[tuple[str, float], list[float]] = {}
    for r in results["recall"]:
        groups.setdefault((r["schedule"], r["budget_fraction"]), []).append(r["bits_per_person"])
    return {key: statistics.mean(values) for key, values in groups.items()}


def phases(results: dict, seconds: list[float]) -> str:
    """The table's last four cells: each round's time, how the demo ran, and its two phases
    (one cell for both when the runs and their recall ran side by side)."""
    wall = results.get("wall_clock_s", {})
    workers = results.get("workers", {"processes": 1, "threads_each": None})
    threads = workers["threads_each"] or "torch's default"
    precisions = {run.get("precision") or "unrecorded" for run in results["runs"].values()}
    how = f"{workers['processes']} x {threads}, training {'/'.join(sorted(precisions))}"
    rounds = ", ".join(f"{s:.0f}" for s in seconds)
    if "side_by_side" in wall:
        both = f"{wall['side_by_side']:.0f} (side by side)"
        return f"{rounds} | {how} | {both} | {both} |"
    training, recall = wall.get("training_and_reuse", nan), wall.get("recall_evaluation", nan)
    return f"{rounds} | {how} | {training:.0f} | {recall:.0f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="main", help="git revision to compare against")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--preset", default="default")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--keep", type=Path, default=None, help="keep this tree's last demo here")
    parser.add_argument("--also", action="append", default=[], metavar="ARGS")
    args = parser.parse_args()
    if args.keep is not None and args.keep.exists():
        parser.error(f"--keep {args.keep} exists; give a new directory")
    with tempfile.TemporaryDirectory(prefix="demo-speed-") as tmp:
        baseline = export_source(args.baseline, Path(tmp) / "baseline")
        programs = {
            f"baseline ({args.baseline})": (baseline, []),
            "this tree": (ROOT / "src", []),
            **{f"this tree {extra}": (ROOT / "src", shlex.split(extra)) for extra in args.also},
        }
        seconds: dict[str, list[float]] = {name: [] for name in programs}
        results: dict[str, dict] = {}
        for r in range(args.rounds):
            order = list(programs) if r % 2 == 0 else list(reversed(programs))
            for i, name in enumerate(order):
                out = Path(tmp) / f"out-{r}-{i}"
                src, extra = programs[name]
                seconds[name].append(run_demo(src, extra, out, args.preset, args.threads))
                results[name] = json.loads((out / "results.json").read_text())
                print(f"round {r + 1}: {name}: {seconds[name][-1]:.0f} s", flush=True)
                if args.keep is not None and name == "this tree":
                    shutil.rmtree(args.keep, ignore_errors=True)
                    shutil.copytree(out, args.keep)
    base = next(iter(programs))
    threads = f"OMP_NUM_THREADS={args.threads}" if args.threads else "each tree's own choice"
    print(f"\npreset {args.preset}, {args.rounds} round(s), threads: {threads}\n")
    print(
        "| program | demo wall-clock s (median) | rounds | processes x threads, precision "
        "| training s | recall evaluation s | baseline / this |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in programs:
        ratio = statistics.median(seconds[base]) / statistics.median(seconds[name])
        print(
            f"| {name} | {statistics.median(seconds[name]):.0f} | "
            + phases(results[name], seconds[name])
            + f" {ratio:.2f}x |"
        )
    others = [name for name in programs if name != base]
    a = results[base]
    for key in ("people", "recall_people", "flop_budget", "depths"):
        print(f"{key}: " + ", ".join(f"{name} {results[name][key]}" for name in programs))
    print("\n| run | steps (" + " / ".join(programs) + ") | realised FLOPs (same order) |")
    print("| --- | --- | --- |")
    for run in a["runs"]:
        steps = " / ".join(str(results[name]["runs"][run]["steps"]) for name in programs)
        flops = " / ".join(f"{results[name]['runs'][run]['flops']:.4g}" for name in programs)
        print(f"| {run} | {steps} | {flops} |")
    print("\n| schedule | budget | " + " | ".join(f"bits ({name})" for name in programs) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in programs) + " |")
    means = {name: recall_means(results[name]) for name in programs}
    for key in sorted(means[base]):
        cells = " | ".join(f"{means[name].get(key, nan):.2f}" for name in [base, *others])
        print(f"| {key[0]} | {key[1]:.0%} | {cells} |")


if __name__ == "__main__":
    main()
