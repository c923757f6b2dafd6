"""Benchmark: the memory model of a transformers looped architecture (compute/looped_memory.py),
fitted at small sizes and checked against measured peaks at sizes the fit never saw.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/looped_memory.py --fit     # rewrites the fit
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/looped_memory.py --check   # held-out peaks

--fit: `--configs` random small Inkling2Loop configurations (seeded), each run forward once at
depth 2 or 3 in fp32 and under bf16 autocast, with all weights trained and with the default
`[train.lowrank]` adapters; every tensor saved for the backward is counted once (by storage)
and charged to the decoder layer application, message read or model-level code that made it
(autocast's weight copies apart). Least squares per layer kind gives the coefficients of
`LAYER_FEATURES` and the rest; written to src/fixedfirst/compute/looped_memory_fit.json with the
fit's largest relative residual.

--check: the two held-out sizes (`HELD_OUT`, never among the fitted ones: their widths lie
outside the fitted range), one real training step each (the trainer's `train_step`, AdamW
state already there) in a fresh process per arm, full and low-rank, with and without
activation checkpointing, fp32 on the CPU; the peak is the tensors alive before the step
(weights, AdamW's state, buffers, the batch; counted by storage) plus the highest point of the
step's own allocations less its frees, as torch's profiler records them (`profile_memory`).
MemTracker, which benchmarks/memory_model.py uses for our own model, refuses a model with frozen
weights (it hooks every parameter's gradient); on the full arms the two agree to the byte (checked
at the width-160 size: 132.54 MiB both).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

ARCHITECTURE = "Inkling2LoopForCausalLM"
HELD_OUT = {
    "width 160, 6 layers": dict(
        vocab_size=1000, unpadded_vocab_size=1000, hidden_size=160, num_hidden_layers=6,
        layer_types=["hybrid_sliding"] * 2 + ["hybrid", "hybrid_sliding"] + ["hybrid"] * 2,
        n_layers_per_attn_res_block=2, loop_layer_index_start=2, loop_layer_index_end=4,
        num_attention_heads=5, num_key_value_heads=1, head_dim=32, swa_num_attention_heads=5,
        swa_num_key_value_heads=5, swa_head_dim=32, sliding_window_size=48, rel_extent=128,
        moe_intermediate_size=128, n_routed_experts=12, num_experts_per_tok=3, loop_gate_rank=24,
        max_position_embeddings=256,
    ),
    "width 256, 4 layers": dict(
        vocab_size=2048, unpadded_vocab_size=2048, hidden_size=256, num_hidden_layers=4,
        layer_types=["hybrid_sliding", "hybrid", "hybrid_sliding", "hybrid"],
        n_layers_per_attn_res_block=1, loop_layer_index_start=1, loop_layer_index_end=3,
        num_attention_heads=8, num_key_value_heads=2, head_dim=32, swa_num_attention_heads=4,
        swa_num_key_value_heads=2, swa_head_dim=64, sliding_window_size=64, rel_extent=96,
        moe_intermediate_size=192, n_routed_experts=8, num_experts_per_tok=2, loop_gate_rank=32,
        max_position_embeddings=256,
    ),
}  # fmt: skip
CHECK_ROWS, CHECK_SEQ, CHECK_DEPTHS = 2, 128, (1, 4)


def random_options(draw: random.Random) -> tuple[dict[str, Any], int, int, int]:
    """A small configuration the fit sees, and rows, sequence length and depth to run it at."""
    s = draw.choice([1, 2])
    pre, loop, post = s * draw.choice([1, 2]), s * draw.choice([1, 2]), draw.choice([0, 1, 2])
    layers = pre + loop + post
    heads, swa_heads = draw.choice([2, 3, 4]), draw.choice([2, 3, 4])
    experts = draw.choice([2, 4, 6, 8])
    seq = draw.choice([16, 24, 32, 48, 64])
    options = dict(
        vocab_size=(v := draw.choice([128, 200, 384, 512])), unpadded_vocab_size=v,
        hidden_size=draw.choice([32, 48, 64, 80, 96]), num_hidden_layers=layers,
        layer_types=[draw.choice(["hybrid", "hybrid_sliding"]) for _ in range(layers)],
        n_layers_per_attn_res_block=s, loop_layer_index_start=pre, loop_layer_index_end=pre + loop,
        num_attention_heads=heads, num_key_value_heads=draw.choice([1, heads]),
        head_dim=draw.choice([8, 16, 24]), swa_num_attention_heads=swa_heads,
        swa_num_key_value_heads=draw.choice([1, swa_heads]), swa_head_dim=draw.choice([8, 16, 24]),
        sliding_window_size=draw.choice([8, 16, 32, 40]), rel_extent=draw.choice([16, 32, 48, 80]),
        moe_intermediate_size=draw.choice([16, 32, 48, 64, 96]), n_routed_experts=experts,
        num_experts_per_tok=draw.choice([k for k in (1, 2, 3) if k <= experts]),
        loop_gate_rank=draw.choice([4, 8, 16]), max_position_embeddings=64,
    )  # fmt: skip
    return options, draw.choice([1, 2, 3]), seq, draw.choice([2, 3])


def census(options: dict[str, Any], rows: int, seq: int, depth: int, bf16: bool, lowrank: bool):
    """Bytes saved for the backward by one forward (with the loss), by what made them."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    from fixedfirst.config import LowRankConfig, TransformersModelConfig
    from fixedfirst.model.loss import next_token_loss
    from fixedfirst.model.lowrank import apply_lowrank
    from fixedfirst.model.transformers_loop import build

    torch.manual_seed(0)
    model = build(TransformersModelConfig("transformers", ARCHITECTURE, options)).train()
    if lowrank:
        model.network = apply_lowrank(model.network, LowRankConfig())
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    label: list[Any] = ["model"]
    made: dict[int, Any] = {}

    class Creator(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            flat = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
            inputs = {t.untyped_storage().data_ptr() for t in flat}
            copy = func is torch.ops.aten._to_copy.default and bool(inputs & params)
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    ptr = t.untyped_storage().data_ptr()
                    if ptr not in inputs:
                        made[ptr] = "copy" if copy else label[0]
            return out

    saved: dict[int, int] = {}

    def pack(t):
        s = t.untyped_storage()
        saved.setdefault(s.data_ptr(), s.nbytes())
        return t

    text = model.transformers_model.model
    counts: dict[int, int] = {}
    for i, layer in enumerate(text.layers):

        def enter(module, args, i=i):
            counts[i] = counts.get(i, 0) + 1
            label[0] = ("layer", i, counts[i])

        layer.register_forward_pre_hook(enter)
        layer.register_forward_hook(lambda module, args, out: label.__setitem__(0, "model"))
    text.message_input.register_forward_pre_hook(lambda m, a: label.__setitem__(0, "message"))
    text.message_input.register_forward_hook(lambda m, a, o: label.__setitem__(0, "model"))
    x = torch.randint(0, options["unpadded_vocab_size"], (rows, seq + 1))
    autocast = torch.autocast("cpu", torch.bfloat16, enabled=bf16)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), Creator(), autocast:
        next_token_loss(model(x[:, :-1], depth), x[:, 1:])
    by_maker: dict[Any, int] = {}
    for ptr, nbytes in saved.items():
        if ptr not in params:
            maker = made.get(ptr, "model")
            by_maker[maker] = by_maker.get(maker, 0) + nbytes
    return by_maker


def fit(configs: int, seed: int) -> None:
    import torch

    from fixedfirst.compute import looped_memory as lm

    draw = random.Random(seed)
    cases = [random_options(draw) for _ in range(configs)]
    fits, worst = {}, {}
    for bf16 in (False, True):
        for lowrank in (False, True):
            rows_by: dict[str, list[tuple[list[float], float]]] = {}
            for options, rows, seq, depth in cases:
                shape = lm.looped_shape(ARCHITECTURE, options, None)
                counted = census(options, rows, seq, depth, bf16, lowrank)
                applications: list[Any] = []
                for maker, nbytes in counted.items():
                    if isinstance(maker, tuple):
                        layer = shape.layers[maker[1]]
                        kind = lm.layer_kind(layer, maker[2] > 1)
                        feats = lm.layer_features(shape, layer, rows, seq)
                        rows_by.setdefault(kind, []).append((feats, nbytes))
                        applications.append(layer)
                message = counted.get("message", 0)
                reads = len(shape.looped) * (depth - 1)
                if reads:
                    feats = [reads * f for f in lm.message_features(shape, rows, seq)]
                    rows_by.setdefault("message", []).append((feats, message))
                rows_by.setdefault("model", []).append(
                    (lm.model_features(shape, rows, seq), counted.get("model", 0))
                )
                if bf16:
                    rows_by.setdefault("copies", []).append(
                        (lm.copy_features(shape, applications), counted.get("copy", 0))
                    )
            coefficients: dict[str, Any] = {"layer": {}}
            residual = 0.0
            for kind, samples in rows_by.items():
                a = torch.tensor([f for f, _ in samples], dtype=torch.float64)
                b = torch.tensor([[y] for _, y in samples], dtype=torch.float64)
                scale = a.abs().amax(dim=0).clamp(min=1)
                solved = torch.linalg.lstsq(a / scale, b, driver="gelsd").solution[:, 0] / scale
                predicted = a @ solved
                here = 0.0
                for p, (_, y) in zip(predicted.tolist(), samples, strict=True):
                    if y > 0:
                        here = max(here, abs(p / y - 1))
                residual = max(residual, here)
                print(f"  {kind}: {len(samples)} samples, largest relative residual {here:.2%}")
                values = [round(v, 6) for v in solved.tolist()]
                if kind in ("message", "model", "copies"):
                    coefficients[kind] = values
                else:
                    coefficients["layer"][kind] = values
            coefficients.setdefault("copies", [0.0] * 5)
            key = lm.fit_key(bf16, lowrank)
            fits[key], worst[key] = coefficients, round(residual, 4)
            print(f"{key}: largest relative residual {residual:.2%}", flush=True)
    lm.FIT_FILE.write_text(
        json.dumps(
            {
                "made_by": f"benchmarks/looped_memory.py --fit --configs {configs} --seed {seed}",
                "features": {
                    "layer": list(lm.LAYER_FEATURES),
                    "message": list(lm.MESSAGE_FEATURES),
                    "model": list(lm.MODEL_FEATURES),
                    "copies": [
                        "expert parameters",
                        "other layer parameters",
                        "expert parameters of each layer application",
                        "other parameters of each layer application",
                        "vocab*d",
                    ],
                },
                "largest_relative_residual": worst,
                "fits": fits,
            },
            indent=1,
        )
        + "\n"
    )


def measured_peak(name: str, lowrank: bool, checkpoint: bool, bf16: bool, depth: int) -> int:
    """One step's peak of tensors, AdamW's state already made by a first step."""
    import tempfile

    import torch
    from torch.profiler import ProfilerActivity, profile

    from fixedfirst.config import load_config
    from fixedfirst.data.source import Batch
    from fixedfirst.model.kinds import build_run_model
    from fixedfirst.train.optim import build_optimizer
    from fixedfirst.train.parallel import ParallelModel
    from fixedfirst.train.step import StepContext, train_step

    torch.set_num_threads(1)
    text = run_toml(HELD_OUT[name], lowrank, checkpoint, bf16)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "run.toml"
        path.write_text(text)
        config = load_config(path)
    torch.manual_seed(0)
    model = build_run_model(config).train()
    optimizer = build_optimizer(model, config.train)
    dtype = torch.bfloat16 if bf16 else torch.float32
    context = StepContext(ParallelModel.alone(model), optimizer, config.train, dtype)
    vocab = HELD_OUT[name]["unpadded_vocab_size"]
    x = torch.randint(
        0, vocab, (CHECK_ROWS, CHECK_SEQ + 1), generator=torch.Generator().manual_seed(0)
    )
    batch = Batch(x[:, :-1], x[:, 1:])
    train_step(context, batch, depth, 1e-4, [0] * CHECK_ROWS)

    held = [*model.parameters(), *model.buffers(), batch.inputs, batch.targets]
    held += [v for state in optimizer.state.values() for v in state.values()]
    storages = {
        t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
        for t in held
        if isinstance(t, torch.Tensor)
    }
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiled:
        train_step(context, batch, depth, 1e-4, [0] * CHECK_ROWS)
    events = [e for e in profiled.profiler.kineto_results.events() if e.name() == "[memory]"]
    alive = highest = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        alive += event.nbytes()
        highest = max(highest, alive)
    return sum(storages.values()) + highest


def run_toml(options: dict[str, Any], lowrank: bool, checkpoint: bool, bf16: bool) -> str:
    precision = "bf16" if bf16 else "fp32"
    table = "\n".join(f"{k} = {json.dumps(v)}" for k, v in options.items())
    return (
        f'[model]\nkind = "transformers"\narchitecture = "{ARCHITECTURE}"\n\n'
        f"[model.transformers]\n{table}\n\n"
        f'[schedule]\nkind = "fixed"\nk0 = 1\n\n'
        f"[train]\nbatch_size = {CHECK_ROWS}\nseq_len = {CHECK_SEQ}\n"
        f'device = "cpu"\nprecision = "{precision}"\n'
        f"checkpoint_activations = {str(checkpoint).lower()}\n"
        + ("\n[train.lowrank]\n" if lowrank else "")
    )


def check() -> None:
    import torch

    from fixedfirst.compute.looped_memory import looped_shape, looped_training_memory
    from fixedfirst.compute.memory import Placement
    from fixedfirst.config import LowRankConfig

    print(
        f"torch {torch.__version__}; {CHECK_ROWS} x {CHECK_SEQ} tokens on the CPU (fp32, or bf16 "
        "autocast over fp32 weights), one step after a first; measured: the peak of the step's "
        "tensors (torch's profiler), each arm in a fresh process\n"
    )
    print("| size | arm | precision | K | measured MiB | model MiB | error |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    arms = [
        (name, lowrank, checkpoint, bf16, depth)
        for name in HELD_OUT
        for lowrank in (False, True)
        for checkpoint in (False, True)
        for bf16 in (False, True)
        for depth in CHECK_DEPTHS
    ]
    errors = []
    for name, lowrank, checkpoint, bf16, depth in arms:
        done = subprocess.run(
            [
                sys.executable,
                __file__,
                "--arm",
                json.dumps([name, lowrank, checkpoint, bf16, depth]),
            ],
            capture_output=True,
            text=True,
            check=True,
            env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
        )
        measured = int(done.stdout.strip().splitlines()[-1])
        shape = looped_shape(ARCHITECTURE, HELD_OUT[name], LowRankConfig() if lowrank else None)
        model = looped_training_memory(
            shape, Placement("cpu", bf16), lowrank, CHECK_ROWS, CHECK_SEQ, depth, checkpoint
        ).peak
        what = f"{'low-rank' if lowrank else 'full'}, checkpointing {'on' if checkpoint else 'off'}"
        errors.append(model / measured - 1)
        print(
            f"| {name} | {what} | {'bf16' if bf16 else 'fp32'} | {depth} | "
            f"{measured / 2**20:,.1f} | {model / 2**20:,.1f} | {100 * errors[-1]:+.1f}% |",
            flush=True,
        )
    low, high = 100 * min(errors), 100 * max(errors)
    print(f"\nthe model against the measured peak: {low:+.1f}% to {high:+.1f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--configs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arm", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.arm is not None:
        name, lowrank, checkpoint, bf16, depth = json.loads(args.arm)
        print(measured_peak(name, lowrank, checkpoint, bf16, depth))
        return
    if args.fit:
        fit(args.configs, args.seed)
    if args.check:
        check()


if __name__ == "__main__":
    main()
