"""Benchmark: the training step of every study's model, eager and compiled, on this machine.

    .venv/bin/python benchmarks/study_speed.py [--rounds 5] [--shapes lm-table,chains]
        [--threads 1] [--variants "compiled fp32"] > docs/figures/study-speed.txt

Shapes (SHAPES, one line each) are read from the study's own file, with overrides: the
language-model table (configs/sweeps/lm-code-cpu.toml), the candidates for the next
language-model study (the same model with a prelude and coda, 32 and 64 rows of 128 bytes, 32
rows of 256, d = 64), the bios loop preset and the chains preset.

Variants (VARIANTS): `eager` and `compiled` (`LoopedTransformer.compile_loop`, what
train.compile = true runs now), each in fp32 and, where this machine multiplies bf16 natively
(`bf16_speedup` >= BF16_FASTER, the rule of train.precision = "fast"), under bf16 autocast; and
`compiled blocks`, each block compiled on its own (what train.compile ran before). The baseline
of the ratios is what a study got by default before: eager, in the precision "fast" picks here.

Every variant of a shape starts from the same weights and trains on the same batches with the
same per-row initial states; the losses of its first three steps are printed beside eager
fp32's and must agree within LOSS_TOLERANCE. Then the variants take one step each in turn
(in a rotated order), round after round, at every depth. Each step is read on two clocks: the
wall clock and this process's CPU time, which does not count the time spent waiting for a core
that other work holds (this machine is shared). Medians over rounds; a ratio is the median of
the per-round ratios (baseline time / variant time). Model GFLOP/s come from
`compute.flop_model`; MFU is against the best n x n matmul rate (n = 512, 1024, 2048) measured
here on the same clock, threads and precision.

Compilation: a fresh process compiles the shape's training graphs with an empty inductor cache
(cold), then another process with that cache filled (warm, what every run of a study after the
first pays); reported is the first step's wall time and the CPU time it cost, compiler
processes included.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from fixedfirst.compute.flops import flop_model
from fixedfirst.config import ModelConfig, TrainConfig, read_toml
from fixedfirst.data.source import Batch
from fixedfirst.machine.device import BF16_FASTER, bf16_speedup
from fixedfirst.model import LoopedTransformer
from fixedfirst.train.optim import build_optimizer
from fixedfirst.train.parallel import ParallelModel
from fixedfirst.train.step import StepContext, state_seeds, train_step

ROOT = Path(__file__).resolve().parent.parent
LM = "configs/sweeps/lm-code-cpu.toml"
BIOS = "src/fixedfirst/studies/bios/presets/loop.toml"
CHAINS = "src/fixedfirst/studies/chains/presets/default.toml"

SHAPES: dict[str, tuple[str, dict[str, int], tuple[int, ...]]] = {
    # name: (the study's file, overrides "section.key" -> value, depths timed)
    "lm-table": (LM, {}, (1, 4, 16)),
    "lm-1+1+1": (LM, {"model.n_prelude": 1, "model.n_coda": 1}, (4,)),
    "lm-32x128": (LM, {"train.batch_size": 32}, (4,)),
    "lm-64x128": (LM, {"train.batch_size": 64}, (4,)),
    "lm-32x256": (
        LM,
        {"train.batch_size": 32, "train.seq_len": 256, "model.max_seq_len": 256},
        (4,),
    ),
    "lm-d64": (LM, {"model.d_model": 64}, (4,)),
    "bios-loop": (BIOS, {}, (1, 4, 16)),
    "chains": (CHAINS, {}, (1, 4, 16)),
}
"""Adding a shape is one line here."""

LOSS_TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2}
"""Largest |loss - eager fp32 loss| of the first three steps (relative to the loss), by the
precision of the variant: compiled fp32 rounds differently from eager, bf16 much more."""


@dataclass(frozen=True)
class Shape:
    name: str
    model: ModelConfig
    train: TrainConfig
    depths: tuple[int, ...]

    @property
    def tokens(self) -> int:
        return self.train.batch_size * self.train.seq_len


def load_shape(name: str) -> Shape:
    path, overrides, depths = SHAPES[name]
    raw = read_toml(ROOT / path)
    raw = raw.get("base", raw)  # a sweep's base, or a preset
    sections = {"model": dict(raw["model"]), "train": dict(raw["train"])}
    for key, value in overrides.items():
        section, field = key.split(".")
        sections[section][field] = value
    t = sections["train"]
    train = TrainConfig(batch_size=t["batch_size"], seq_len=t["seq_len"], lr=t["lr"], grad_clip=1.0)
    return Shape(name, ModelConfig(**sections["model"]), train, depths)


@dataclass(frozen=True)
class Variant:
    compile: str  # "no", "loop" or "blocks"
    dtype: torch.dtype

    def build(self, shape: Shape) -> LoopedTransformer:
        torch.manual_seed(0)
        model = LoopedTransformer(shape.model).train()
        if self.compile == "loop":
            model.compile_loop()
        elif self.compile == "blocks":
            for block in (*model.prelude, *model.core, *model.coda):
                block.compile()
        return model


def variants(bf16_native: bool) -> dict[str, Variant]:
    found = {
        "eager fp32": Variant("no", torch.float32),
        "compiled blocks fp32": Variant("blocks", torch.float32),
        "compiled fp32": Variant("loop", torch.float32),
    }
    if bf16_native:
        found["eager bf16"] = Variant("no", torch.bfloat16)
        found["compiled bf16"] = Variant("loop", torch.bfloat16)
    return found


def batches(shape: Shape, n: int) -> list[Batch]:
    g = torch.Generator().manual_seed(1)
    rows, length = shape.train.batch_size, shape.train.seq_len
    data = [
        torch.randint(0, shape.model.vocab_size, (rows, length + 1), generator=g) for _ in range(n)
    ]
    return [Batch(x[:, :-1], x[:, 1:]) for x in data]


Step = Callable[[Batch, int, int], float]


def program(shape: Shape, variant: Variant) -> Step:
    model = variant.build(shape)
    optimizer = build_optimizer(model, shape.train)
    context = StepContext(ParallelModel.alone(model), optimizer, shape.train, variant.dtype)
    rows = range(shape.train.batch_size)

    def step(batch: Batch, depth: int, i: int) -> float:
        loss, _ = train_step(context, batch, depth, shape.train.lr, state_seeds(0, i, rows))
        return loss.item()

    return step


def clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def load() -> str:
    """The machine's load average: how many processes wanted a core while this ran."""
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def peak(dtype: torch.dtype) -> tuple[float, float]:
    """(wall, CPU) best FLOP/s of n x n matmuls, n = 512, 1024, 2048, each warmed up."""
    best_wall = best_cpu = 0.0
    for n in (512, 1024, 2048):
        a = torch.full((n, n), 0.5, dtype=dtype)
        b = torch.full((n, n), 0.25, dtype=dtype)
        torch.mm(a, b)
        for _ in range(3 if n >= 2048 else 5):
            w0, c0 = clocks()
            torch.mm(a, b)
            w1, c1 = clocks()
            best_wall = max(best_wall, 2 * n**3 / max(w1 - w0, 1e-9))
            best_cpu = max(best_cpu, 2 * n**3 / max(c1 - c0, 1e-9))
    return best_wall, best_cpu


def first_step(shape_name: str, variant_name: str) -> None:
    """Child mode: build the variant, time its first (compiling) step, print JSON."""
    shape = load_shape(shape_name)
    variant = variants(True)[variant_name]
    step = program(shape, variant)
    batch = batches(shape, 1)[0]
    w0, c0 = clocks()
    step(batch, shape.depths[0], 0)
    w1, c1 = clocks()
    print(json.dumps({"wall": w1 - w0, "cpu_before": c0, "cpu_after": c1}))


def compile_cost(shape: str, variant: str, cache: Path, threads: int) -> tuple[float, float]:
    """(wall, CPU) of the first step of a fresh process whose inductor cache is `cache`; the CPU
    counts the process's own first step and the compiler processes it waited for."""
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(cache), OMP_NUM_THREADS=str(threads))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, __file__, "--first-step", shape, variant],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    child = json.loads(done.stdout.strip().splitlines()[-1])
    total = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return child["wall"], total - child["cpu_before"]


def measure(shape: Shape, found: dict[str, Variant], rounds: int) -> dict:
    """Loss check, then per depth the wall and CPU seconds of every variant, round by round."""
    programs = {name: program(shape, v) for name, v in found.items()}
    check = batches(shape, 3)
    losses = {name: [p(b, 4, i) for i, b in enumerate(check)] for name, p in programs.items()}
    reference = losses["eager fp32"]
    gaps = {}
    for name, got in losses.items():
        gap = max(abs(a - b) / abs(b) for a, b in zip(got, reference, strict=True))
        gaps[name] = gap
        if gap > LOSS_TOLERANCE[found[name].dtype]:
            raise SystemExit(f"{shape.name}, {name}: losses {got} against eager fp32 {reference}")
    data = batches(shape, 2)
    names = list(programs)
    times: dict[int, dict[str, list[tuple[float, float]]]] = {}
    for depth in shape.depths:
        for p in programs.values():
            p(data[0], depth, 0)  # warm-up at this depth
        times[depth] = {name: [] for name in names}
        for r in range(rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                w0, c0 = clocks()
                programs[name](data[r % 2], depth, r + 1)
                w1, c1 = clocks()
                times[depth][name].append((w1 - w0, c1 - c0))
    return {"losses": losses, "gaps": gaps, "times": times}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--variants",
        default=None,
        help="comma-separated: time only these variants beside the baseline and eager fp32",
    )
    parser.add_argument(
        "--compile-shapes",
        default="lm-table,bios-loop,chains",
        help="shapes whose cold and "
        "warm compilation is timed (about two minutes each on a busy 2-core machine)",
    )
    parser.add_argument(
        "--first-step", nargs=2, metavar=("SHAPE", "VARIANT"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.first_step:
        first_step(*args.first_step)
        return
    shapes = [load_shape(name) for name in args.shapes.split(",")]
    speedup = bf16_speedup("cpu")
    native = speedup >= BF16_FASTER
    found = variants(native)
    baseline = "eager bf16" if native else "eager fp32"
    if args.variants:
        asked = set(args.variants.split(","))
        if asked - set(found):
            parser.error(
                f"--variants: no variant {', '.join(sorted(asked - set(found)))} on this "
                f"machine; choose from {', '.join(found)}"
            )
        keep = {baseline, "eager fp32", *asked}
        found = {name: v for name, v in found.items() if name in keep}
    peaks = {torch.float32: peak(torch.float32)}
    if native:
        peaks[torch.bfloat16] = peak(torch.bfloat16)
    print(
        f"torch {torch.__version__}, {args.threads} thread(s), {args.rounds} rounds; "
        f"bf16 matmul {speedup:.3g}x fp32 here ({'native' if native else 'emulated'}: "
        f"precision 'fast' is {'bf16' if native else 'fp32'}"
        f"{'' if native else ', so no bf16 variant is timed'}); baseline: {baseline}"
    )
    print(f"load average at the start (1, 5, 15 min): {load()} on {os.cpu_count()} cores")
    for dtype, (wall, cpu) in peaks.items():
        print(f"matmul peak {str(dtype)[6:]}: {wall / 1e9:.1f} GFLOP/s wall, {cpu / 1e9:.1f} CPU")

    print("\n| shape | d | layers | rows x length | vocab | params |")
    print("| --- | --- | --- | --- | --- | --- |")
    for s in shapes:
        m = s.model
        params = sum(p.numel() for p in LoopedTransformer(m).parameters())
        print(
            f"| {s.name} | {m.d_model} | {m.n_prelude}+{m.n_core}+{m.n_coda} | "
            f"{s.train.batch_size} x {s.train.seq_len} | {m.vocab_size} | {params:,} |"
        )

    print(
        "\n| shape | K | variant | wall ms | CPU ms | x baseline (wall) | x baseline (CPU) "
        "| GFLOP/s (CPU) | MFU (CPU) | first losses: largest gap to eager fp32 |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for s in shapes:
        result = measure(s, found, args.rounds)
        fm = flop_model(s.model, s.train.seq_len)
        for depth, by_name in result["times"].items():
            base = by_name[baseline]
            for name, pairs in by_name.items():
                wall = statistics.median(w for w, _ in pairs)
                cpu = statistics.median(c for _, c in pairs)
                x_wall = statistics.median(b[0] / p[0] for b, p in zip(base, pairs, strict=True))
                x_cpu = statistics.median(b[1] / p[1] for b, p in zip(base, pairs, strict=True))
                rate = s.tokens * fm.train(depth) / cpu
                mfu = rate / peaks[found[name].dtype][1]
                print(
                    f"| {s.name} | {depth} | {name} | {1e3 * wall:.0f} | {1e3 * cpu:.0f} | "
                    f"{x_wall:.2f} | {x_cpu:.2f} | {rate / 1e9:.1f} | {100 * mfu:.0f}% | "
                    f"{result['gaps'][name]:.1e} |"
                )
        sys.stdout.flush()

    print(
        "\n| shape | variant | cold: first step wall s | cold CPU s | warm: wall s | warm CPU s |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for s in [load_shape(name) for name in args.compile_shapes.split(",") if name]:
        with tempfile.TemporaryDirectory(prefix="study-speed-inductor-") as cache:
            cold = compile_cost(s.name, "compiled fp32", Path(cache), args.threads)
            warm = compile_cost(s.name, "compiled fp32", Path(cache), args.threads)
        print(
            f"| {s.name} | compiled fp32 | {cold[0]:.1f} | {cold[1]:.1f} | {warm[0]:.1f} | "
            f"{warm[1]:.1f} |"
        )
    print(f"\nload average at the end (1, 5, 15 min): {load()}")


if __name__ == "__main__":
    main()
