"""Benchmark: what fixed-first's adapters cost a training loop, beside the same loop at a fixed
depth.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/adapter_overhead.py [--steps 40] [--repeats 5]

A tiny transformers Inkling2LoopForCausalLM (tests/inkling_helpers.py's shape, batches of 8 x 64
tokens) trains at depth 2 in two loops: a plain PyTorch loop and the Hugging Face Trainer. Each
runs once with the depth set by hand before the first step, and once under fixed-first's
adapters (`DepthScheduler` with the model's depth handle; `FixedFirstCallback`) following a plan
that also trains every step at depth 2: fixed-first K0 = 2, an auto `plateau` switch fed every
step's loss, a uniform finish over 2..2 (each finishing step's depth drawn from its generator).
So both arms do the same arithmetic, and the difference is the adapters: the plan's lookups and
draws, the handle, the switch rule's observations and checks, the callback's logging.

The two arms alternate `--repeats` times in one process; the table gives each arm's median
seconds per step and their ratio, and, measured inside the adapter arms' own steps (so a busy
machine skews it little), the share of the loop's time spent in the adapters' calls. Needs
transformers >= 5.24 (`pip install 'fixedfirst[looped]'`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import Trainer, TrainerCallback, TrainingArguments

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fixedfirst.compute.flops import FlopModel  # noqa: E402
from fixedfirst.compute.plan import plan_schedule  # noqa: E402
from fixedfirst.config import ScheduleConfig, SwitchConfig  # noqa: E402
from fixedfirst.model.handles import depth_handle  # noqa: E402
from fixedfirst.scheduling.depth_scheduler import DepthScheduler  # noqa: E402
from tests.inkling_helpers import batches, tiny_inkling  # noqa: E402

ROWS, LENGTH, DEPTH = 8, 65, 2
SCHEDULE = ScheduleConfig(kind="fixed-first", k0=DEPTH, switch="auto", k_min=DEPTH, k_max=DEPTH)
SWITCH = SwitchConfig(rule="plateau", floor=0.3, ceiling=0.7, window=0.25, every=1)


class Stopwatch:
    """Wraps a method and sums the seconds spent in it."""

    def __init__(self, fn: Any) -> None:
        self.fn, self.seconds = fn, 0.0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - started


def plain_loops(steps: int) -> tuple[list[float], list[float], float]:
    """Two identical models trained side by side, a step of one then a step of the other, each
    first in turn (so the machine's load falls on both alike): seconds of each step at a fixed
    depth and under the adapters, and the adapters' share of the second loop's time."""
    plan = plan_schedule(
        SCHEDULE, FlopModel(1.0, 1.0, 1.0), ROWS * LENGTH, steps=steps, switch=SWITCH
    )
    fixed, adapted = tiny_inkling(), tiny_inkling()
    fixed.config.loop_num_passes = DEPTH
    scheduler = DepthScheduler(plan, depth_handle(adapted))
    begin, observe = Stopwatch(scheduler.begin), Stopwatch(scheduler.observe)
    optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (fixed, adapted)]
    seconds: tuple[list[float], list[float]] = ([], [])
    for step in range(steps):
        tokens = batches(ROWS, LENGTH, step)
        for arm in (0, 1) if step % 2 == 0 else (1, 0):  # neither always goes first
            model, optimizer = (fixed, adapted)[arm], optimizers[arm]
            started = time.perf_counter()
            if arm:
                begin(step)
            loss = model(input_ids=tokens, labels=tokens).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            value = loss.item()
            if arm:
                observe(step + 1, value)
            seconds[arm].append(time.perf_counter() - started)
    return seconds[0], seconds[1], (begin.seconds + observe.seconds) / sum(seconds[1])


class StepTimer(TrainerCallback):
    """The seconds between the starts of consecutive optimizer steps: a whole step, logging and
    every callback included. First in the Trainer's list, so it starts before the others."""

    def __init__(self) -> None:
        self.starts: list[float] = []

    def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
        self.starts.append(time.perf_counter())

    def on_train_end(self, *args: Any, **kwargs: Any) -> None:
        self.starts.append(time.perf_counter())

    def seconds(self) -> list[float]:
        return [b - a for a, b in itertools.pairwise(self.starts)]


def trainer_run(steps: int, adapted: bool, out: Path) -> tuple[list[float], float]:
    """Seconds of each optimizer step of one Trainer run, and the adapters' share of its time."""
    from fixedfirst.scheduling.hf_trainer import FixedFirstCallback

    model = tiny_inkling()
    model.config.loop_num_passes = DEPTH
    plan = plan_schedule(
        SCHEDULE, FlopModel(1.0, 1.0, 1.0), ROWS * LENGTH, steps=steps, switch=SWITCH
    )
    rows = [{"input_ids": r, "labels": r} for r in batches(ROWS * steps, LENGTH, 1)]
    args = TrainingArguments(
        output_dir=str(out),
        max_steps=steps,
        per_device_train_batch_size=ROWS,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        log_level="error",
    )
    timer = StepTimer()
    callbacks: list[TrainerCallback] = [timer]
    watches: list[Stopwatch] = []
    if adapted:
        callback = FixedFirstCallback(plan)
        for name in ("on_step_begin", "on_log"):
            watch = Stopwatch(getattr(callback, name))
            setattr(callback, name, watch)
            watches.append(watch)
        callbacks.append(callback)
    trainer = Trainer(model=model, args=args, train_dataset=rows, callbacks=callbacks)
    with contextlib.redirect_stdout(io.StringIO()):  # the Trainer prints each log line
        trainer.train()
    seconds = timer.seconds()
    return seconds, sum(w.seconds for w in watches) / sum(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=6)
    args = parser.parse_args()
    torch.set_num_threads(1)
    per_step: dict[tuple[str, bool], list[float]] = defaultdict(list)
    inside: dict[str, list[float]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        plain_loops(20)  # warm up: kernels chosen, caches filled
        for repeat in range(args.repeats):
            fixed, adapted, share = plain_loops(args.steps)
            per_step["plain loop", False] += fixed
            per_step["plain loop", True] += adapted
            inside["plain loop"].append(share)
            order = (False, True) if repeat % 2 == 0 else (True, False)  # ABBA...
            for arm in order:
                seconds, share = trainer_run(args.steps, arm, Path(tmp))
                per_step["Trainer", arm] += seconds[1:]  # the first step starts the Trainer
                if arm:
                    inside["Trainer"].append(share)
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, 1 thread; "
        f"{args.steps} steps of {ROWS} x {LENGTH} tokens at depth {DEPTH} per run; "
        f"{args.repeats} runs per arm (plain loops: steps alternated; Trainers: runs alternated)"
    )
    print()
    print("| loop | fixed depth, s/step | adapters, s/step | ratio | time in the adapters |")
    print("| --- | --- | --- | --- | --- |")
    for loop in ("plain loop", "Trainer"):
        fixed = statistics.median(per_step[loop, False])
        adapted = statistics.median(per_step[loop, True])
        share = statistics.median(inside[loop])
        print(
            f"| {loop} | {fixed:.4f} | {adapted:.4f} | {adapted / fixed:.3f} | {100 * share:.3f}% |"
        )


if __name__ == "__main__":
    main()
