"""The first run on a GPU: everything a lent machine is checked for, in one command that fits a
device window (about 6 minutes by default), from the source tree with no install step.

    PYTHONPATH=src python3 benchmarks/first_run.py --out $OUT/first-run [--budget 360]
    PYTHONPATH=src python3 benchmarks/first_run.py --smoke --out DIR      # the CPU, ~1 minute

Each row is printed (and flushed) as it is measured and appended to OUT/first-run.md; the numbers
are in OUT/first-run.json, rewritten after every row, which `fixedfirst plan --measured OUT`
reads. The sections, in order:

1. environment: Python, torch, the device; the bf16 matmul peak measured on random operands
   (and on zeros, which run faster) beside the datasheet's (machine/accelerators.py).
2. parity with the CPU: the same fp32 weights scored at several depths on the device and on the
   CPU, in fp32 (TF32 off) and bf16, each within its tolerance; a few training steps from the
   same weights on both, with a deterministic initial state (zeros).
3. host syncs in one trainer step (its batch path and `train_step`): counted by dispatch
   (train/host_syncs.py) and, on CUDA, by `torch.cuda.set_sync_debug_mode`; the text of every
   warning the step raised is kept in first-run.json's "warnings", counted or not.
4. the trainer end to end: a short run (synthetic data) through `Trainer`, its warm-up
   measurement before step 0 and, on a GPU, its last evaluation in bf16 and in fp32.
5. speed: configs/lm-200m.toml's training step at depths 1, 2, 4, 8, 16, eager: tokens/s and
   MFU against both peaks.
6. memory: the deepest step's peak against the memory model (compute/memory.py).
7. compiled: the cold compile of every graph (train/warm_up.py) timed apart, then each depth's
   step, its MFU, the compiled/eager ratio, and the graphs compiled after the warm-up (0).
8. the GPU-marked tests (tests/test_gpu.py), what `benchmarks/gpu_check.py` ran.

`--budget SECONDS` (default 360): a section that would not fit in the time left is skipped, with
a row saying so. `--smoke` runs every section on the CPU on a tiny model (make test runs it);
without CUDA and without --smoke, the model is lm-200m's layout at d = 128 in fp32. Exit status 1
when a check fails (parity, a host sync, a graph compiled after the warm-up, a GPU test).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

from fixedfirst.compute.flops import flop_model
from fixedfirst.compute.memory import MARGIN, Placement, training_memory
from fixedfirst.config import ModelConfig, TrainConfig, load_config
from fixedfirst.data.prefetch import DeviceBatches
from fixedfirst.data.source import Batch
from fixedfirst.data.synthetic import SyntheticSource
from fixedfirst.machine.accelerators import accelerator_named
from fixedfirst.machine.device import PEAK_FLOPS_ENV, cuda_settings, exact_float32
from fixedfirst.model import LoopedTransformer
from fixedfirst.model.loss import next_token_loss
from fixedfirst.model.memory import GIB
from fixedfirst.train import warm_up
from fixedfirst.train.host_syncs import HostSyncCounter
from fixedfirst.train.optim import build_optimizer
from fixedfirst.train.parallel import ParallelModel
from fixedfirst.train.peak_memory import step_peak
from fixedfirst.train.step import StepContext, state_seeds, train_step

ROOT = Path(__file__).resolve().parents[1]

DEPTHS = (1, 2, 4, 8, 16)
PARITY_DEPTHS = (1, 4, 16)
TOLERANCE = {"fp32": 1e-4, "bf16": 2e-2}
"""Largest |NLL difference| (nats) from the CPU's fp32: fp32 differs in summation order only;
bf16 autocast rounds every matmul's inputs (tests/test_gpu.py holds bf16 training to 0.02)."""
SYNC = "called a synchronizing"
"""How torch words each sync under its sync debug mode. Its notice that the mode is a prototype
also says "synchronizing", and is not a sync."""
COLD_COMPILE_S = {"cuda": 150.0, "cpu": 60.0}
"""What the compiled section budgets for building its graphs before it starts (a guess on a GPU
until this script has run there; on a CPU docs/guides/study-speed.md's 40-60 s)."""


class Report:
    """Rows printed and flushed as they are measured, appended to OUT/first-run.md, and the
    numbers in OUT/first-run.json (rewritten after each row, so a killed run leaves them)."""

    def __init__(self, out: Path, command: str) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.markdown, self.json = out / "first-run.md", out / "first-run.json"
        self.data: dict = {"format": "first-run/1", "command": command, "rows": [], "warnings": []}
        self.failed: list[str] = []
        header = f"# {command}\n\n| section | check | result |\n| --- | --- | --- |\n"
        self.markdown.write_text(header)
        print(header, end="", flush=True)

    def row(self, section: str, check: str, result: str, ok: bool = True) -> None:
        line = f"| {section} | {check} | {result} |"
        print(line, flush=True)
        with open(self.markdown, "a") as f:
            f.write(line + "\n")
        self.data["rows"].append([section, check, result])
        if not ok:
            self.failed.append(f"{section}: {check}")
        self.save()

    def keep_warnings(
        self, section: str, check: str, counted: list[str], discounted: list[str]
    ) -> None:
        """Keep the text of every warning a check counted and of every one it did not, so that a
        count can be read again from first-run.json (a count of one means nothing without it)."""
        self.data["warnings"].append(
            {"section": section, "check": check, "counted": counted, "discounted": discounted}
        )
        self.save()

    def save(self) -> None:
        tmp = self.json.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        tmp.replace(self.json)


class Budget:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def allows(self, report: Report, section: str, needs: float) -> bool:
        if needs <= self.left():
            return True
        report.row(section, "skipped", f"needs about {needs:.0f} s, {self.left():.0f} s left")
        return False


@dataclasses.dataclass
class Setup:
    device: torch.device
    dtype: torch.dtype
    model: ModelConfig
    """The speed, memory and compiled sections' model: lm-200m on CUDA."""
    micro: int
    seq: int
    small: ModelConfig
    """Parity training, syncs and the trainer's run: small on every device."""
    steps: int
    compile: bool

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def precision(self) -> str:
        return "bf16" if self.dtype == torch.bfloat16 else "fp32"


def setup(args: argparse.Namespace) -> Setup:
    cuda = torch.cuda.is_available() and not args.smoke
    device = torch.device("cuda" if cuda else "cpu")
    preset = load_config(ROOT / "configs" / "lm-200m.toml")
    layout = dict(vocab_size=2048, d_model=128, n_heads=2, max_seq_len=128)
    if args.smoke:
        layout = dict(vocab_size=61, d_model=32, n_heads=4, max_seq_len=32)
        layout.update(n_prelude=1, n_core=1, n_coda=1)
    small = dataclasses.replace(preset.model, **layout)
    if not cuda:
        seq = 16 if args.smoke else 128
        return Setup(
            device, torch.float32, small, 2, seq, small, args.steps or 1, not args.no_compile
        )
    cuda_settings(device)
    seq = preset.train.seq_len
    memory = torch.cuda.get_device_properties(device).total_memory
    where = Placement("cuda", True)
    micro = next(
        (
            m
            for m in (16, 8, 4, 2, 1)
            if training_memory(preset.model, where, m, 1, seq, max(DEPTHS)).peak
            <= (1 - MARGIN) * memory
        ),
        1,
    )
    small = dataclasses.replace(preset.model, d_model=256, n_heads=4, vocab_size=2048)
    small = dataclasses.replace(small, max_seq_len=128)
    return Setup(
        device,
        torch.bfloat16,
        preset.model,
        micro,
        seq,
        small,
        args.steps or 3,
        not args.no_compile,
    )


def verdict(ok: bool) -> str:
    return "ok" if ok else "FAILED"


def numbers(values, digits: int = 5) -> str:
    return ", ".join(f"{v:.{digits}f}" for v in values)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_rate(device: torch.device, dtype: torch.dtype, n: int, zeros: bool = False) -> float:
    """FLOP/s of an n^3 matmul: the mean of 10 after 3 warm-ups, on random operands (or zeros)."""
    g = torch.Generator(device=device).manual_seed(0)
    make = (
        (lambda: torch.zeros(n, n, device=device))
        if zeros
        else (lambda: torch.randn(n, n, device=device, generator=g))
    )
    a, b = make().to(dtype), make().to(dtype)
    for _ in range(3):
        torch.mm(a, b)
    synchronize(device)
    started = time.perf_counter()
    for _ in range(10):
        torch.mm(a, b)
    synchronize(device)
    return 10 * 2 * n**3 / (time.perf_counter() - started)


def environment(report: Report, s: Setup) -> dict[str, float | None]:
    section = "environment"
    package = Path(sys.modules["fixedfirst"].__file__ or "").parent
    where = package.relative_to(ROOT) if package.is_relative_to(ROOT) else package
    report.row(
        section,
        "python, torch",
        f"Python {platform.python_version()}, torch {torch.__version__} (CUDA "
        f"{torch.version.cuda or 'none'}); fixedfirst from {where}",
    )
    datasheet = None
    if s.cuda:
        props = torch.cuda.get_device_properties(s.device)
        kind = accelerator_named(props.name, props.total_memory)
        datasheet = kind.bf16_flops if kind is not None else None
        report.row(
            section,
            "device",
            f"{props.name}, {props.total_memory / GIB:.1f} GiB, {props.multi_processor_count} SMs",
        )
    else:
        report.row(
            section, "device", "the CPU" + (" (--smoke)" if torch.cuda.is_available() else "")
        )
    n = 8192 if s.cuda else 512 if s.model.d_model <= 32 else 1024
    measured = matmul_rate(s.device, s.dtype, n)
    zeros = matmul_rate(s.device, s.dtype, n, zeros=True)
    sheet = f"{datasheet / 1e12:,.0f} TFLOP/s" if datasheet else "none for this device"
    report.row(
        section,
        f"{s.precision} matmul peak, {n}^3",
        f"{measured / 1e12:,.3f} TFLOP/s on random operands ({zeros / 1e12:,.3f} on zeros); "
        f"datasheet {sheet}",
    )
    peaks = {"measured": measured, "zeros": zeros, "datasheet": datasheet}
    report.data["environment"] = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(s.device) if s.cuda else "cpu",
        "precision": s.precision,
        "peaks": peaks,
    }
    return peaks


def scoring_batch(config: ModelConfig, rows: int, seq: int, seed: int = 0) -> Batch:
    x = torch.randint(
        0, config.vocab_size, (rows, seq + 1), generator=torch.Generator().manual_seed(seed)
    )
    return Batch(x[:, :-1], x[:, 1:])


def parity(report: Report, s: Setup) -> None:
    """The same weights and tokens on the CPU (the reference, fp32) and the device."""
    section = "parity with the CPU"
    torch.manual_seed(0)
    reference = LoopedTransformer(s.model).eval()
    batch = scoring_batch(s.model, 2, min(256, s.seq))
    with torch.no_grad():
        expected = dict(reference.logits_by_depth(batch.inputs, PARITY_DEPTHS))
    model = copy.deepcopy(reference).to(s.device)
    inputs, targets = batch.inputs.to(s.device), batch.targets.to(s.device)
    for precision, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        with (
            torch.no_grad(),
            exact_float32(),
            torch.autocast(s.device.type, dtype, enabled=dtype != torch.float32),
        ):
            got = dict(model.logits_by_depth(inputs, PARITY_DEPTHS))
        for depth in PARITY_DEPTHS:
            mine, theirs = got[depth].float().cpu(), expected[depth]
            nll = abs(
                next_token_loss(mine, batch.targets).item()
                - next_token_loss(theirs, batch.targets).item()
            )
            logits = (mine - theirs).abs().max().item()
            ok = nll <= TOLERANCE[precision]
            report.row(
                section,
                f"scoring, {precision}, depth {depth}",
                f"NLL off the CPU's by {nll:.2e} (tolerance {TOLERANCE[precision]:g}), logits "
                f"by at most {logits:.2e}: {verdict(ok)}",
                ok,
            )
    del targets
    # A few training steps from the same weights, with zeros for the initial state.
    config = dataclasses.replace(s.small, state_init="zeros")
    train = TrainConfig(batch_size=4, seq_len=min(128, s.seq), micro_batch_size=4, lr=1e-3)
    batches = [scoring_batch(config, 4, train.seq_len, seed) for seed in range(3)]

    def losses(device: torch.device, dtype: torch.dtype) -> list[float]:
        torch.manual_seed(1)
        model = LoopedTransformer(config).to(device)
        step = StepContext(
            ParallelModel.alone(model),
            build_optimizer(model, train, fused=device.type == "cuda"),
            train,
            dtype,
        )
        out = []
        with exact_float32():
            for i, b in enumerate(batches):
                loss, _ = train_step(
                    step,
                    Batch(b.inputs.to(device), b.targets.to(device)),
                    4,
                    train.lr,
                    state_seeds(0, i, range(4)),
                )
                out.append(loss.item())
        return out

    cpu = losses(torch.device("cpu"), torch.float32)
    for precision, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        got = losses(s.device, dtype)
        worst = max(abs(a - b) for a, b in zip(got, cpu, strict=True))
        ok = worst <= TOLERANCE[precision]
        report.row(
            section,
            f"3 training steps, {precision}, depth 4",
            f"losses {numbers(got)} against the CPU's {numbers(cpu)}: largest difference "
            f"{worst:.2e}: {verdict(ok)}",
            ok,
        )


def sync_warnings(caught: list[warnings.WarningMessage]) -> tuple[list[str], list[str]]:
    """The texts of the warnings a step raised: those counted as syncs, and the rest."""
    texts = [f"{w.category.__name__}: {w.message}" for w in caught]
    return [t for t in texts if SYNC in t], [t for t in texts if SYNC not in t]


def host_syncs(report: Report, s: Setup) -> None:
    """One step as the trainer takes it: the next batch, `train_step`, the batch after it."""
    section = "host syncs"
    torch.manual_seed(0)
    model = LoopedTransformer(s.small).to(s.device)
    train = TrainConfig(batch_size=4, seq_len=min(128, s.seq), micro_batch_size=2)
    # The fused AdamW the trainer takes on CUDA, here too: the CPU's unfused one reads its step
    # counts on the host, which on CUDA live on the host anyway.
    context = StepContext(
        ParallelModel.alone(model), build_optimizer(model, train, fused=True), train, s.dtype
    )
    batches = DeviceBatches(SyntheticSource(s.small.vocab_size, train.seq_len), 4, 0, 1, s.device)

    def step(index: int) -> None:
        train_step(context, batches.next(), 4, 1e-3, state_seeds(0, index, range(4)))
        batches.prefetch()

    step(0)  # AdamW's state
    synchronize(s.device)
    with HostSyncCounter() as counted, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if s.cuda:
            torch.cuda.set_sync_debug_mode("warn")
        try:
            step(1)
        finally:
            if s.cuda:
                torch.cuda.set_sync_debug_mode("default")
    driver, other = sync_warnings(caught)
    seen = f"; CUDA's sync debug mode: {len(driver)}" if s.cuda else ""
    total = counted.total + len(driver)
    check = "one trainer step (batch path and train_step), eager"
    report.keep_warnings(section, check, driver, other)
    report.row(
        section,
        check,
        f"{counted.total} by dispatch ({dict(counted.by_op) or 'none'}){seen}",
        total == 0,
    )


TRAINER_TOML = """
[model]
vocab_size = {vocab}
d_model = {d}
n_heads = {heads}
n_prelude = 1
n_core = 2
n_coda = 1
max_seq_len = {seq}

[schedule]
kind = "fixed-first"
k0 = 2
switch = 0.5
k_max = 8

[train]
tokens = {tokens}
batch_size = 8
micro_batch_size = 4
seq_len = {seq}
log_every = 4
checkpoint_every = 8
compile = false

[eval]
depths = [1, 2, 4, 8]
batches = 2
"""


def trainer_run(report: Report, s: Setup, peak: float) -> None:
    from fixedfirst.config import RunConfig, read_toml
    from fixedfirst.train.metrics import read_metrics
    from fixedfirst.train.trainer import Trainer

    section = "trainer"
    seq = min(64, s.small.max_seq_len)
    text = TRAINER_TOML.format(
        vocab=s.small.vocab_size,
        d=s.small.d_model,
        heads=s.small.n_heads,
        seq=seq,
        tokens=16 * 8 * seq,
    )
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "run.toml").write_text(text)
        config = RunConfig.from_dict(read_toml(Path(tmp) / "run.toml"))
        config = dataclasses.replace(
            config,
            train=dataclasses.replace(config.train, device=s.device.type, precision=s.precision),
        )
        os.environ.setdefault(PEAK_FLOPS_ENV, repr(peak))  # the peak measured above
        started = time.perf_counter()
        trainer = Trainer(config, str(Path(tmp) / "run"), quiet=True)
        summary = trainer.train()
        seconds = time.perf_counter() - started
        records = read_metrics(Path(tmp) / "run" / "metrics.jsonl")
    final = [r for r in records if r["kind"] == "eval"][-1]
    deepest = trainer.deepest
    measured = (
        f"; before step 0 depth {deepest.depth} measured {deepest.peak / GIB:.3f} GiB"
        if deepest
        else ""
    )
    report.row(
        section,
        f"{summary['steps']} steps of a d = {s.small.d_model} model, {s.precision}",
        f"{seconds:.1f} s in all{measured}",
    )
    nll = final["nll_by_depth"]
    exact = final.get("nll_by_depth_fp32")
    if exact is not None:
        worst = max(abs(nll[d] - exact[d]) for d in nll)
        report.row(
            section,
            "last evaluation, bf16 against fp32",
            f"largest difference {worst:.2e} over depths {', '.join(nll)}",
            worst <= TOLERANCE["bf16"],
        )
    else:
        report.row(
            section,
            "last evaluation",
            f"NLL {numbers(nll.values(), 3)} at depths {', '.join(nll)} ({s.precision} only: "
            "fp32 beside bf16 on a GPU)",
        )


def timed_steps(s: Setup, context: StepContext, batch: Batch, depth: int, steps: int) -> float:
    """The median seconds of `steps` steps at `depth` after one untimed."""
    times = []
    for i in range(steps + 1):
        synchronize(s.device)
        started = time.perf_counter()
        train_step(context, batch, depth, 1e-4, state_seeds(0, i, range(s.micro)))
        synchronize(s.device)
        times.append(time.perf_counter() - started)
    return statistics.median(times[1:])


def speed_context(s: Setup) -> tuple[LoopedTransformer, StepContext, Batch]:
    torch.manual_seed(0)
    model = LoopedTransformer(s.model).to(s.device)
    train = TrainConfig(batch_size=s.micro, seq_len=s.seq, micro_batch_size=s.micro)
    context = StepContext(
        ParallelModel.alone(model), build_optimizer(model, train, fused=s.cuda), train, s.dtype
    )
    b = scoring_batch(s.model, s.micro, s.seq)
    return model, context, Batch(b.inputs.to(s.device), b.targets.to(s.device))


def speed(
    report: Report, s: Setup, budget: Budget, peaks: dict, mode: str, eager: dict[int, float]
) -> dict[int, float]:
    """Each depth's step, timed; returns depth -> seconds."""
    section = f"speed, {mode}"
    fm = flop_model(s.model, s.seq)
    tokens = s.micro * s.seq
    model, context, batch = speed_context(s)
    if mode == "compiled":
        model.compile_loop()
        torch._dynamo.reset()
        started = time.perf_counter()
        warm_up.warm_up(context, max(DEPTHS), s.seq, [batch], compiled=True)
        synchronize(s.device)
        report.row(
            section,
            "cold compile (every graph, train/warm_up.py)",
            f"{time.perf_counter() - started:.1f} s",
        )
        graphs_before = dict(torch._dynamo.utils.counters["stats"])
    report.data.setdefault(
        "speed",
        {
            "model": "lm-200m" if s.cuda else f"d = {s.model.d_model}",
            "micro_batch": s.micro,
            "seq_len": s.seq,
            "rows": [],
        },
    )
    times: dict[int, float] = {}
    for depth in DEPTHS:
        estimate = (times[1] * fm.train(depth) / fm.train(1) * (s.steps + 1)) if 1 in times else 0.0
        if not budget.allows(report, section, estimate):
            break
        seconds = timed_steps(s, context, batch, depth, s.steps)
        times[depth] = seconds
        flops = tokens * fm.train(depth) / seconds
        mfu = {
            "measured": flops / peaks["measured"],
            "datasheet": flops / peaks["datasheet"] if peaks["datasheet"] else None,
        }
        sheet = f", {mfu['datasheet']:.1%} of the datasheet's" if mfu["datasheet"] else ""
        ratio = f"; compiled/eager time {seconds / eager[depth]:.2f}" if depth in eager else ""
        report.row(
            section,
            f"depth {depth}, {s.micro} x {s.seq} tokens",
            f"{seconds * 1e3:,.1f} ms, {tokens / seconds:,.0f} tokens/s, MFU "
            f"{mfu['measured']:.1%} of the measured peak{sheet}{ratio}",
        )
        report.data["speed"]["rows"].append(
            {"mode": mode, "depth": depth, "seconds": seconds, "mfu": mfu}
        )
        report.save()
    if mode == "compiled":
        validation = [scoring_batch(s.model, s.micro, s.seq, 1)]
        from fixedfirst.evaluation.nll import validation_nll

        validation_nll(model, validation, list(range(1, 17)), s.device, s.dtype)
        after = torch._dynamo.utils.counters["stats"]
        new = after.get("unique_graphs", 0) - graphs_before.get("unique_graphs", 0)
        report.row(
            section,
            "graphs compiled after the warm-up (the depths above, an evaluation at 1..16)",
            str(new),
            new == 0,
        )
    return times


def memory(report: Report, s: Setup) -> None:
    section = "memory"
    model, context, batch = speed_context(s)
    depth = max(DEPTHS)

    def step() -> None:
        train_step(context, batch, depth, 1e-4, state_seeds(0, 0, range(s.micro)))

    step()  # AdamW's state
    peak = step_peak(s.device, step, model, context.optimizer, batch.inputs, batch.targets)
    where = Placement("cuda" if s.cuda else "cpu", s.dtype == torch.bfloat16)
    predicted = training_memory(s.model, where, s.micro, 1, s.seq, depth).peak
    reserved = f", the allocator reserved {peak.reserved / GIB:.2f} GiB" if peak.reserved else ""
    report.row(
        section,
        f"eager step at depth {depth}, micro-batch {s.micro}",
        f"peak {peak.tensors / GIB:.3f} GiB of tensors, memory model {predicted / GIB:.3f} GiB "
        f"({predicted / peak.tensors - 1:+.1%}){reserved}",
    )


def gpu_tests(report: Report) -> None:
    """tests/test_gpu.py's GPU-marked tests in a fresh process, one row each (pytest's report)."""
    import xml.etree.ElementTree as ElementTree

    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "report.xml"
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-m",
            "gpu",
            "-p",
            "no:cacheprovider",
            f"--junitxml={xml}",
            "tests/test_gpu.py",
        ]
        env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        if not xml.exists():
            report.row(
                "gpu tests",
                "tests/test_gpu.py",
                f"did not run: {(done.stdout + done.stderr)[-300:]}",
                False,
            )
            return
        for case in ElementTree.parse(xml).getroot().iter("testcase"):
            result, ok = "passed", True
            for outcome in ("skipped", "failure", "error"):
                found = case.find(outcome)
                if found is not None:
                    result, ok = (
                        f"{outcome}: {found.get('message', '')[:200]}",
                        outcome == "skipped",
                    )
            report.row("gpu tests", str(case.get("name")), result, ok)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("first-run-output"),
        help="the output folder (default: first-run-output)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=360.0,
        metavar="SECONDS",
        help="skip what would not fit (default 360)",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="every section on the CPU on a tiny model"
    )
    parser.add_argument("--steps", type=int, help="timed steps per depth (3 on CUDA, 1 here)")
    parser.add_argument("--no-compile", action="store_true", help="skip the compiled section")
    args = parser.parse_args(argv)
    budget = Budget(args.budget)
    started = time.perf_counter()
    report = Report(
        args.out, "benchmarks/first_run.py " + " ".join(sys.argv[1:] if argv is None else argv)
    )
    s = setup(args)
    peaks = environment(report, s)
    parity(report, s)
    host_syncs(report, s)
    if budget.allows(report, "trainer", 20.0):
        trainer_run(report, s, peaks["measured"])
    eager = speed(report, s, budget, peaks, "eager", {})
    if budget.allows(report, "memory", 2 * eager.get(max(DEPTHS), 10.0) + 5):
        memory(report, s)
    if not s.compile:
        report.row("speed, compiled", "skipped", "--no-compile")
    elif budget.allows(
        report,
        "speed, compiled",
        COLD_COMPILE_S[s.device.type] + sum(eager.values()) * (s.steps + 1),
    ):
        speed(report, s, budget, peaks, "compiled", eager)
    if s.cuda and budget.allows(report, "gpu tests", 90.0):
        gpu_tests(report)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = time.process_time() + children.ru_utime + children.ru_stime
    report.row(
        "total",
        "wall-clock",
        f"{time.perf_counter() - started:.0f} s ({cpu:.0f} s of CPU); {len(report.failed)} "
        "check(s) failed" + "".join(f"; {name}" for name in report.failed),
        not report.failed,
    )
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
