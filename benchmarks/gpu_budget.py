"""What every part of benchmarks/gpu_questions.py stands on: its report (rows printed as they
are made, the JSON rewritten after each, the markdown made from the JSON alone), its budget, the
device, and each part's plan: the part's training step measured at a few depths on this device,
and the library's plan (`fixedfirst plan`'s table) on that MFU, by which a part sizes its runs."""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import resource
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from fixedfirst.cli.plan_cmd import format_sweep
from fixedfirst.compute.flops import flop_model
from fixedfirst.compute.plan import plan_run
from fixedfirst.config import RunConfig, TrainConfig
from fixedfirst.data.source import Batch
from fixedfirst.machine.accelerators import accelerator_named
from fixedfirst.machine.device import cuda_settings, measured_peak_flops, resolve_dtype
from fixedfirst.machine.planning import Hardware, MfuByDepth, plan_on_gpus
from fixedfirst.model import LoopedTransformer
from fixedfirst.model.memory import GIB
from fixedfirst.train import warm_up
from fixedfirst.train.compilation import shared_cache
from fixedfirst.train.optim import build_optimizer
from fixedfirst.train.parallel import ParallelModel
from fixedfirst.train.step import StepContext, state_seeds, train_step

SHARES = {"figure 1": 0.45, "language model": 0.6, "savings": 1.0}
"""Each part's share of the budget left when it starts: about 45%, 33% and 22% of the whole."""
TRAIN_SHARE = 0.5
"""Of a part's share, what its runs' training steps are planned to take; the rest is for the
measurement before it, compiling, evaluation (recall at 64 depths, NLL at 18), checkpoints and
reports. The JSON records planned against trained and elapsed, to set it from a GPU's."""
MEASURED_DEPTHS = (1, 4, 16)
MIN_STEPS = {"gpu": 60, "smoke": 4}
"""A part whose share would give its shortest run fewer steps is skipped."""


class Report:
    """Rows printed and flushed as they are made; OUT/gpu-questions.json rewritten after each,
    and OUT/gpu-questions.md made from it (`markdown`), so a killed run leaves both."""

    def __init__(self, out: Path, command: str) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.out = out
        self.json, self.markdown = out / "gpu-questions.json", out / "gpu-questions.md"
        self.data: dict[str, Any] = {
            "format": "gpu-questions/1",
            "command": command,
            "rows": [],
            "plans": {},
            "parts": {},
        }
        print(markdown(self.data), end="", flush=True)
        self.save()

    def row(self, part: str, check: str, result: str) -> None:
        print(f"| {part} | {check} | {result} |", flush=True)
        self.data["rows"].append([part, check, result])
        self.save()

    def plan(self, part: str, text: str) -> None:
        print(f"\n{text}\n", flush=True)
        self.data["plans"][part] = text
        self.save()

    def save(self) -> None:
        for path, text in (
            (self.json, json.dumps(self.data, indent=1)),
            (self.markdown, markdown(self.data)),
        ):
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.replace(path)


def markdown(data: dict[str, Any]) -> str:
    """The report, from the JSON alone: every row, then each part's plan as it was printed."""
    lines = [f"# {data['command']}", "", "| part | check | result |", "| --- | --- | --- |"]
    lines += [f"| {part} | {check} | {result} |" for part, check, result in data["rows"]]
    for part, text in data["plans"].items():
        lines += ["", f"## The plan of {part}", "", "```", text, "```"]
    return "\n".join(lines) + "\n"


class Budget:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())


@dataclasses.dataclass
class Setup:
    device: torch.device
    smoke: bool
    name: str
    memory: int
    """Bytes of the device's memory."""
    peak: float
    """The FLOP/s every MFU here is a share of: the datasheet's bf16 peak on a GPU the
    accelerator table knows (what `fixedfirst plan` plans on), else the matmul rate measured."""
    peak_source: str
    work: Path
    compile: bool
    """Whether the parts' runs compile as their presets say (--no-compile: all eager)."""

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def min_steps(self) -> int:
        return MIN_STEPS["smoke" if self.smoke else "gpu"]


def environment(report: Report, smoke: bool, work: Path, compile: bool) -> Setup:
    part = "environment"
    cuda = torch.cuda.is_available() and not smoke
    device = torch.device("cuda" if cuda else "cpu")
    report.row(
        part,
        "python, torch",
        f"Python {platform.python_version()}, torch {torch.__version__} (CUDA "
        f"{torch.version.cuda or 'none'})",
    )
    if cuda:
        cuda_settings(device)
        props = torch.cuda.get_device_properties(device)
        measured = measured_peak_flops("cuda", torch.bfloat16)
        kind = accelerator_named(props.name, props.total_memory)
        peak, source = (
            (kind.bf16_flops, "the datasheet's bf16 peak")
            if kind is not None
            else (measured, "the bf16 matmul rate measured here")
        )
        name, memory = props.name, props.total_memory
        report.row(
            part,
            "device",
            f"{name}, {memory / GIB:.1f} GiB; bf16 matmul {measured / 1e12:,.0f} TFLOP/s "
            f"measured; MFU below is of {peak / 1e12:,.0f} TFLOP/s, {source}",
        )
    else:
        peak = measured_peak_flops("cpu", torch.float32)
        source = "the fp32 matmul rate measured here"
        name, memory = "the CPU", os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        report.row(
            part,
            "device",
            f"the CPU{' (--smoke)' if smoke else ''}, {torch.get_num_threads()} threads; fp32 "
            f"matmul {peak / 1e9:,.1f} GFLOP/s measured, what MFU below is a share of",
        )
    report.data["environment"] = {"device": name, "peak_flops": peak, "peak_source": source}
    return Setup(device, smoke, name, memory, peak, source, work, compile)


def timed_steps(context: StepContext, batch: Batch, depth: int, steps: int, cuda: bool) -> float:
    """The median seconds of `steps` steps at `depth` after one untimed."""
    times = []
    for i in range(steps + 1):
        if cuda:
            torch.cuda.synchronize()
        started = time.perf_counter()
        train_step(context, batch, depth, 1e-4, state_seeds(0, i, range(len(batch.inputs))))
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return statistics.median(times[1:])


def measured_mfu(report: Report, part: str, config: RunConfig, s: Setup, cache: Path) -> Hardware:
    """The part's training step timed at MEASURED_DEPTHS on one micro-batch, compiled when its
    runs compile (in their shared cache, which they then find warm): the hardware to plan on."""
    t = config.train
    dtype = resolve_dtype(t.precision, s.device)
    model_config = config.own_model("the GPU questions' warm-up")
    micro = t.micro_batch(1)
    torch.manual_seed(0)
    model = LoopedTransformer(model_config).to(s.device)
    train = TrainConfig(batch_size=micro, seq_len=t.seq_len, micro_batch_size=micro)
    context = StepContext(
        ParallelModel.alone(model), build_optimizer(model, train, fused=s.cuda), train, dtype
    )
    tokens = torch.randint(0, model_config.vocab_size, (micro, t.seq_len + 1))
    batch = Batch(tokens[:, :-1].to(s.device), tokens[:, 1:].to(s.device))
    compiled = t.compile and s.cuda
    with shared_cache(cache):
        if compiled:
            # Each part's graphs from a clean slate: the parts before it compiled other shapes,
            # which would count towards dynamo's limit of recompiles per function.
            torch._dynamo.reset()
            model.compile_loop()
            started = time.perf_counter()
            warm_up.warm_up(context, max(MEASURED_DEPTHS), t.seq_len, [batch], compiled=True)
            report.row(part, "warm-up: cold compile", f"{time.perf_counter() - started:.1f} s")
        fm = flop_model(model_config, t.seq_len)
        points = []
        for depth in MEASURED_DEPTHS:
            seconds = timed_steps(context, batch, depth, 1 if s.smoke else 3, s.cuda)
            mfu = micro * t.seq_len * fm.train(depth) / seconds / s.peak
            points.append((depth, mfu))
            report.row(
                part,
                f"warm-up: depth {depth}, {micro} x {t.seq_len} tokens, {dtype}".replace(
                    "torch.", ""
                ),
                f"{seconds * 1e3:,.1f} ms a step, MFU {mfu:.1%}",
            )
    del model, context
    mode = "compiled" if compiled else "eager"
    source = f"the warm-up measured here ({s.name}, {mode}, of {s.peak_source})"
    return Hardware(s.name, 1, s.memory, s.peak, MfuByDepth(tuple(points), source))


def planned_seconds(configs: dict[str, RunConfig], hardware: Hardware) -> float:
    return sum(plan_on_gpus(c, hardware).seconds(False) for c in configs.values())


def largest_scale(
    configs: dict[str, RunConfig], hardware: Hardware, seconds: float, smoke: bool
) -> float:
    """The factor on the budget of `configs` that makes their training take `seconds` on the
    plan (whose seconds are linear in it); at most 1 with --smoke, whose targets are toy sizes
    that stand as they are when the budget allows them."""
    scale = seconds / planned_seconds(configs, hardware)
    return min(scale, 1.0) if smoke else scale


def fewest_steps(configs: dict[str, RunConfig]) -> int:
    return min(plan_run(c).total_steps for c in configs.values())


def print_plan(report: Report, part: str, configs: dict[str, RunConfig], hw: Hardware) -> float:
    """The plan of a part's runs, printed and kept; returns its training seconds."""
    plans = {name: plan_on_gpus(config, hw) for name, config in configs.items()}
    report.plan(part, format_sweep(plans, part))
    return sum(p.seconds(False) for p in plans.values())


def part_budget(report: Report, part: str, budget: Budget, record: dict) -> float | None:
    """The part's share of the budget left; None, with a row saying so, when none is left."""
    share = SHARES[part] * budget.left()
    record["share_s"] = share
    if share <= 0:
        report.row(part, "skipped", "the budget is spent")
        return None
    report.row(part, "share of the budget", f"{share:.0f} s of the {budget.left():.0f} s left")
    return share


def training_seconds(report: Report, part: str, share: float, started: float) -> float | None:
    """What the part's runs may train for: TRAIN_SHARE of its share, less what it has spent
    since `started`; None, with a row saying so, when that is nothing."""
    seconds = TRAIN_SHARE * share - (time.monotonic() - started)
    if seconds <= 0:
        report.row(part, "skipped", f"no time left to train in its {share:.0f} s share")
        return None
    return seconds


def too_short(report: Report, part: str, steps: int, s: Setup) -> bool:
    """Whether the part's shortest run would take fewer than its minimum steps (then skipped)."""
    if steps >= s.min_steps:
        return False
    report.row(part, "skipped", f"its shortest run would take {steps} steps (< {s.min_steps})")
    return True


def cpu_seconds() -> float:
    """This process's CPU time and its finished children's (side-by-side study workers)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def copy_out(report: Report, files: dict[str, Path]) -> None:
    for name, path in files.items():
        if path.is_file():
            shutil.copyfile(path, report.out / name)


def fits_again(record: dict, started: float, share: float) -> bool:
    """Another group as long as the last still ends within 110% of the part's share."""
    return time.monotonic() - started + record["last_group_s"] <= 1.1 * share
