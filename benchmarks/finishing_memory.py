"""Benchmark: the peak memory of one finishing step of a transformers looped model, with and
without activation checkpointing, full fine-tuning against low-rank adapters, side by side.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/finishing_memory.py [--repeats 2]

The model is transformers' Inkling2LoopForCausalLM at width 512 (4 decoder layers, the middle two
looped; 8 experts of width 512, two per token), trained at depth 6 (6 loop passes) on 4 rows of
256 tokens, built as a run builds it (`build_run_model`: `[train.lowrank]` rank 16 on the
attention projections and the experts for the low-rank arms) and stepped by the trainer's own
step (`train_step`: forward, backward, clipping, AdamW) on the CPU in fp32.

How it is measured: each arm runs in a fresh Python process (nothing one arm allocated is held
by the allocator of another), whose allocator returns freed tensors to the system
(`CHILD_ENVIRONMENT`), so that resident memory follows the live tensors. It takes one step
first, so that AdamW's moments exist, as in any step after the first; then the kernel's record
of the process's peak resident memory is reset (`/proc/self/clear_refs`, 5: VmHWM back to VmRSS)
and the measured step runs; the table gives the resident memory before that step (weights,
gradients freed to None, AdamW's state, the interpreter and torch) and the peak during it
(VmHWM), and the step's own share, the peak minus the memory before it. Each arm runs
`--repeats` times (each in its own process); the table gives the median. Linux only (it reads
/proc). Needs transformers >= 5.24 and peft.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

WIDTH, DEPTH, ROWS, LENGTH = 512, 6, 4, 256
ARMS = {
    "full": (False, False),
    "full, checkpointed": (False, True),
    "low-rank": (True, False),
    "low-rank, checkpointed": (True, True),
}
"""Arm name: (low-rank adapters, activation checkpointing)."""

CHILD_ENVIRONMENT = {
    "OMP_NUM_THREADS": "1",
    "MALLOC_MMAP_THRESHOLD_": "131072",
    "MALLOC_TRIM_THRESHOLD_": "131072",
}
"""One thread; glibc's allocator told to map every block over 128 KiB on its own and hand it
back when freed (by default it raises that threshold to the largest block freed so far and then
keeps such blocks: the first step's activations would stay resident and hide the second's)."""

CONFIG = f"""
[model]
kind = "transformers"
architecture = "Inkling2LoopForCausalLM"

[model.transformers]
vocab_size = 1024
unpadded_vocab_size = 1024
hidden_size = {WIDTH}
num_hidden_layers = 4
layer_types = ["hybrid_sliding", "hybrid", "hybrid_sliding", "hybrid"]
n_layers_per_attn_res_block = 1
loop_layer_index_start = 1
loop_layer_index_end = 3
num_attention_heads = 8
num_key_value_heads = 2
head_dim = 64
swa_num_attention_heads = 8
swa_num_key_value_heads = 2
swa_head_dim = 64
sliding_window_size = 128
moe_intermediate_size = {WIDTH}
n_routed_experts = 8
num_experts_per_tok = 2
max_position_embeddings = {LENGTH}

[schedule]
kind = "fixed"
k0 = {DEPTH}

[train]
batch_size = {ROWS}
seq_len = {LENGTH}
device = "cpu"
precision = "fp32"
"""


def memory_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def one_arm(lowrank: bool, checkpointed: bool) -> dict[str, float]:
    """Build, step once, reset the peak, step again; the memory in MiB."""
    import tempfile

    import torch

    from fixedfirst.config import load_config
    from fixedfirst.data.source import Batch
    from fixedfirst.model.kinds import build_run_model
    from fixedfirst.train.optim import build_optimizer
    from fixedfirst.train.parallel import ParallelModel
    from fixedfirst.train.step import StepContext, train_step

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "run.toml"
        path.write_text(CONFIG + ("\n[train.lowrank]\nrank = 16\n" if lowrank else ""))
        overrides = [f"train.checkpoint_activations={str(checkpointed).lower()}"]
        config = load_config(path, overrides)
    model = build_run_model(config).train()
    optimizer = build_optimizer(model, config.train)
    context = StepContext(ParallelModel.alone(model), optimizer, config.train)
    tokens = torch.randint(0, 1024, (ROWS, LENGTH + 1), generator=torch.Generator().manual_seed(0))
    batch = Batch(tokens[:, :-1], tokens[:, 1:])
    train_step(context, batch, DEPTH, 1e-4, [0] * ROWS)
    Path("/proc/self/clear_refs").write_text("5")
    before = memory_kib("VmRSS")
    train_step(context, batch, DEPTH, 1e-4, [0] * ROWS)
    peak = memory_kib("VmHWM")
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {
        "before": before / 1024,
        "peak": peak / 1024,
        "step": (peak - before) / 1024,
        "trained": trained,
        "parameters": sum(p.numel() for p in model.parameters()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--arm", choices=sorted(ARMS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.arm is not None:  # a child: one arm, its numbers as JSON on stdout
        print(json.dumps(one_arm(*ARMS[args.arm])))
        return
    import peft
    import torch
    import transformers

    results: dict[str, list[dict[str, float]]] = {arm: [] for arm in ARMS}
    for _ in range(args.repeats):
        for arm in ARMS:  # the arms alternate, each run in a process of its own
            done = subprocess.run(
                [sys.executable, __file__, "--arm", arm],
                capture_output=True,
                text=True,
                check=True,
                env={**os.environ, **CHILD_ENVIRONMENT},
            )
            results[arm].append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, peft "
        f"{peft.__version__}; Inkling2LoopForCausalLM width {WIDTH}, "
        f"{results['full'][0]['parameters']:,.0f} parameters, depth {DEPTH}, {ROWS} x {LENGTH} "
        f"tokens, fp32 on the CPU, 1 thread; median of {args.repeats} processes per arm\n"
    )
    print(
        "| arm | trained parameters | before the step, MiB | peak in the step, MiB | "
        "the step's own, MiB | own / full's |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    full = statistics.median(r["step"] for r in results["full"])
    for arm, runs in results.items():
        before, peak, step = (
            statistics.median(r[k] for r in runs) for k in ("before", "peak", "step")
        )
        print(
            f"| {arm} | {runs[0]['trained']:,.0f} | {before:,.0f} | {peak:,.0f} | {step:,.0f} | "
            f"{step / full:.2f} |"
        )


if __name__ == "__main__":
    main()
