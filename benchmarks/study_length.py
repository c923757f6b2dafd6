"""Benchmark: one study-length run under two sets of settings, as two processes at the same time.

    .venv/bin/python benchmarks/study_length.py --out DIR [--run uniform-seed0]
        [--sweep configs/sweeps/lm-code-cpu.toml] [--today SRC] [--warm] [--tokens N]

Each arm is `fixedfirst sweep SWEEP --only RUN --jobs 1` into a directory of its own, started
at the same moment as the other, with one torch thread (OMP_NUM_THREADS=1), so that on a
two-core machine each has a core and both see the same background load. The arms:

- `today`: the code and sweep file of another source tree (--today: a checkout of the commit to
  compare with, e.g. `git archive main | tar -x -C /tmp/today`), with their own defaults;
  without --today, this tree's sweep file with `train.compile = false` (eager).
- `new`: this tree's code and sweep file as committed.

With --warm the `new` arm's study directory gets its compile cache filled first by a two-step
run of the same model (what the runs after the first of a study find), so its cold start is not
counted; without it both arms start from whatever caches they have. --tokens shortens both
arms alike (train.tokens of the sweep's base; the run must not set its own). Reported per arm:
the wall time from start to exit, the CPU seconds of the process and its children (compile
workers included), the training wall-clock the run records, and what summary.json says it used.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def arm_sweep(source: Path, args: argparse.Namespace, name: str, **lines: str) -> Path:
    """The sweep file an arm runs: the tree's own, with its data path made absolute (or
    --data) and the given `key = value` lines of [base.train] replaced or added."""
    original = source / args.sweep
    text = original.read_text()
    data = args.data or (original.parent / re.search(r'(?m)^path = "(.*)"', text)[1]).resolve()
    text = re.sub(r'(?m)^path = ".*"', f'path = "{data}"', text)
    for key, value in lines.items():
        text, n = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", text)
        if n == 0:
            text = text.replace("[base.train]\n", f"[base.train]\n{key} = {value}\n", 1)
    path = args.out / f"{name}.toml"
    path.write_text(text)
    return path


def start(
    name: str, source: Path, sweep_file: Path, run: str, out: Path
) -> tuple[subprocess.Popen, float]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)  # each arm's own default
    env["PYTHONPATH"] = str(source / "src")
    command = [sys.executable, "-m", "fixedfirst", "sweep", str(sweep_file)]
    command += ["--only", run, "--jobs", "1", "--out", str(out), "--quiet"]
    log = open(out.parent / f"{name}.log", "w")  # noqa: SIM115 (closed with the process)
    return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT), time.time()


WARM_UP = """
import sys
from fixedfirst.config import RunConfig
from fixedfirst.studies.sweep import load_sweep
from fixedfirst.train.trainer import Trainer
raw = load_sweep(sys.argv[1]).run(sys.argv[2]).config.to_dict()
raw["train"].update(tokens=2 * raw["train"]["batch_size"] * raw["train"]["seq_len"], flops=None)
raw["eval"]["every"] = 0
Trainer(RunConfig.from_dict(raw), sys.argv[3], quiet=True).train()
"""
"""Two steps of a sweep's run and its closing evaluation, in a process of their own."""


def warm_cache(sweep_file: Path, args: argparse.Namespace, cache: Path) -> None:
    """Compile the run's training and evaluation graphs into `cache` (two steps of it)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", TORCHINDUCTOR_CACHE_DIR=str(cache))
    env["PYTHONPATH"] = str(ROOT / "src")
    scratch = args.out / "warm-up"
    shutil.rmtree(scratch, ignore_errors=True)
    command = [sys.executable, "-c", WARM_UP, str(sweep_file), args.run, str(scratch)]
    subprocess.run(command, env=env, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--sweep", default="configs/sweeps/lm-code-cpu.toml")
    parser.add_argument("--run", default="uniform-seed0")
    parser.add_argument("--today", type=Path, default=None)
    parser.add_argument("--warm", action="store_true")
    parser.add_argument("--data", type=Path, default=None, help="the prepared data to train on")
    parser.add_argument("--tokens", type=int, default=None, help="train.tokens of both arms")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    arms = {"today": args.today or ROOT, "new": ROOT}
    eager = {} if args.today else {"compile": "false"}
    length = {} if args.tokens is None else {"tokens": str(args.tokens)}
    files = {
        "today": arm_sweep(arms["today"], args, "today", **eager, **length),
        "new": arm_sweep(ROOT, args, "new", **length),
    }
    if args.warm:
        warm_cache(files["new"], args, args.out / "new" / "compile-cache")
    processes = {
        name: start(name, source, files[name], args.run, args.out / name)
        for name, source in arms.items()
    }
    finished = {}
    while len(finished) < len(processes):
        pid, status, usage = os.wait4(-1, 0)
        for name, (process, started) in processes.items():
            if process.pid == pid:
                cpu = usage.ru_utime + usage.ru_stime
                finished[name] = (time.time() - started, cpu, os.waitstatus_to_exitcode(status))
    tokens = "" if args.tokens is None else f", train.tokens = {args.tokens:,}"
    print(
        f"{args.run} of {args.sweep}{tokens}, two processes at once, one thread each "
        f"({'new arm with a warm compile cache' if args.warm else 'caches as found'}); "
        f"load average at the end (1, 5, 15 min): "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores\n"
    )
    print("| arm | source | wall s | CPU s | training s | steps | compiled | precision | threads |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, source in arms.items():
        wall, cpu, code = finished[name]
        summary_path = args.out / name / "runs" / args.run / "summary.json"
        if code != 0 or not summary_path.exists():
            print(f"| {name} | {source} | failed ({code}): see {args.out / (name + '.log')} |")
            continue
        s = json.loads(summary_path.read_text())
        print(
            f"| {name} | {source} | {wall:.0f} | {cpu:.0f} | {s['wall']:.0f} | {s['steps']} | "
            f"{s['compiled']} | {s['precision']} | {s['threads']} |"
        )


if __name__ == "__main__":
    main()
