"""Benchmark: our training step against a plain re-implementation of the same computation.

    .venv/bin/python benchmarks/peer_step.py [--repeats 5] [--threads N] [--dims 128,256]

The reference below (`Reference*`) is the looped transformer written the straightforward way, as
a reader of the papers would write it (and as fixedfirst itself was written before it was made
fast): the norm as x * rsqrt(mean(x^2) + eps), rotary over strided halves and a stack, the
adapter applied to torch.cat([state, e]) in every iteration. It is the yardstick the
optimisations are measured against, since a peer's code cannot be vendored. Both models hold
the same weights (the reference loads our state dict), see the same batches and the same
per-row initial states and take the same AdamW step with the same clipping, so their losses
agree to 1e-5 for the first steps (checked, and printed).

Architecture: 1 prelude / 2 core / 1 coda layers, SwiGLU with hidden 4d, sandwich norm, tied
embeddings, vocabulary 2048, batch 32 x 128, fp32, full backprop; d = 128 and 256, K = 1, 4, 16.
Three programs are timed, alternating step by step so that a busy machine slows them alike:
the reference, our step (`train_step`, the trainer's own), and our step with its loop
compiled (`compile_loop`; its cold start, a fresh inductor cache, is reported separately).
Ratios are medians over rounds of (ours / reference) within a round. MFU is model FLOPs
(`compute.flop_model`) per second over the measured matmul peak with the same threads.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time

# A fresh inductor cache, so that the compile time reported is a cold start.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="peer-step-inductor-"))

import torch
import torch.nn.functional as F
from torch import nn

from fixedfirst.compute.flops import flop_model
from fixedfirst.config import ModelConfig, TrainConfig
from fixedfirst.data.source import Batch
from fixedfirst.machine.device import choose_threads, measured_peak_flops
from fixedfirst.model import LoopedTransformer
from fixedfirst.train.optim import build_optimizer
from fixedfirst.train.parallel import ParallelModel
from fixedfirst.train.step import StepContext, state_seeds, train_step

VOCAB, BATCH, SEQ = 2048, 32, 128

# -- the reference: the same computation, written plainly ------------------------------------


class ReferenceNorm(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


def reference_rotary(x, cos, sin):
    """Rotate channel pairs (2i, 2i+1) of (B, H, T, hd) by position * frequency i."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class ReferenceAttention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)

    def forward(self, x, cos, sin):
        B, T, D = x.shape
        q, k, v = self.qkv(x).split(D, dim=-1)
        q, k, v = (t.view(B, T, self.heads, D // self.heads).transpose(1, 2) for t in (q, k, v))
        q, k = reference_rotary(q, cos, sin), reference_rotary(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(B, T, D))


class ReferenceMLP(nn.Module):
    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.up = nn.Linear(d, 2 * hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        gate, value = self.up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * value)


class ReferenceBlock(nn.Module):
    def __init__(self, d: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.attn_norm, self.attn = ReferenceNorm(d), ReferenceAttention(d, heads)
        self.mlp_norm, self.mlp = ReferenceNorm(d), ReferenceMLP(d, hidden)
        self.attn_post_norm, self.mlp_post_norm = ReferenceNorm(d), ReferenceNorm(d)

    def forward(self, x, cos, sin):
        x = self.attn_post_norm(x + self.attn(self.attn_norm(x), cos, sin))
        return self.mlp_post_norm(x + self.mlp(self.mlp_norm(x)))


class ReferenceLooped(nn.Module):
    def __init__(self, d: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d)
        self.prelude = nn.ModuleList([ReferenceBlock(d, heads, hidden)])
        self.adapter = nn.Linear(2 * d, d, bias=False)
        self.core = nn.ModuleList(ReferenceBlock(d, heads, hidden) for _ in range(2))
        self.core_norm = ReferenceNorm(d)
        self.coda = nn.ModuleList([ReferenceBlock(d, heads, hidden)])
        self.out_norm = ReferenceNorm(d)
        self.head = nn.Linear(d, VOCAB, bias=False)
        self.head.weight = self.embed.weight
        hd = d // heads
        inv_freq = 1.0 / 10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        angles = torch.outer(torch.arange(SEQ, dtype=torch.float64), inv_freq)
        self.cos, self.sin = angles.cos().float(), angles.sin().float()

    def forward(self, tokens, depth, seeds):
        x = self.embed(tokens)
        for block in self.prelude:
            x = block(x, self.cos, self.sin)
        e = x
        std = math.sqrt(2 / (5 * e.shape[-1]))
        state = torch.empty_like(e)
        for row, seed in zip(state, seeds, strict=True):
            gen = torch.Generator().manual_seed(seed)
            nn.init.trunc_normal_(row, std=std, a=-3 * std, b=3 * std, generator=gen)
        for _ in range(depth):
            state = self.adapter(torch.cat([state, e], dim=-1))
            for block in self.core:
                state = block(state, self.cos, self.sin)
        x = self.core_norm(state)
        for block in self.coda:
            x = block(x, self.cos, self.sin)
        return self.head(self.out_norm(x))


# -- the programs ---------------------------------------------------------------------------


def model_config(d: int) -> ModelConfig:
    return ModelConfig(
        vocab_size=VOCAB,
        d_model=d,
        n_heads=d // 64,
        d_ff=4 * d,
        norm="sandwich",
        tie_embeddings=True,
        max_seq_len=SEQ,
    )


TRAIN = TrainConfig(batch_size=BATCH, seq_len=SEQ, lr=1e-3, grad_clip=1.0)


def batches(n: int) -> list[Batch]:
    g = torch.Generator().manual_seed(1)
    data = [torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g) for _ in range(n)]
    return [Batch(x[:, :-1], x[:, 1:]) for x in data]


def ours(d: int, compiled: bool):
    torch.manual_seed(0)
    model = LoopedTransformer(model_config(d)).train()
    if compiled:
        model.compile_loop()
    context = StepContext(ParallelModel.alone(model), build_optimizer(model, TRAIN), TRAIN)

    def step(batch: Batch, depth: int, i: int) -> float:
        seeds = state_seeds(0, i, range(BATCH))
        loss, _ = train_step(context, batch, depth, TRAIN.lr, seeds)
        return loss.item()

    return step


def reference(d: int):
    torch.manual_seed(0)
    source = LoopedTransformer(model_config(d))
    model = ReferenceLooped(d, d // 64, 4 * d).train()
    model.load_state_dict(source.state_dict())
    optimizer = build_optimizer(model, TRAIN)

    def step(batch: Batch, depth: int, i: int) -> float:
        logits = model(batch.inputs, depth, state_seeds(0, i, range(BATCH)))
        loss = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), TRAIN.grad_clip)
        for group in optimizer.param_groups:
            group["lr"] = TRAIN.lr
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    return step


def timed(step, batch: Batch, depth: int, i: int) -> float:
    t0 = time.perf_counter()
    step(batch, depth, i)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--dims", default="128,256")
    parser.add_argument("--depths", default="1,4,16")
    args = parser.parse_args()
    threads, why = choose_threads(args.threads)
    why = "--threads" if args.threads else why
    torch.set_num_threads(threads)
    dims = [int(v) for v in args.dims.split(",")]
    depths = [int(v) for v in args.depths.split(",")]
    peak = measured_peak_flops("cpu", torch.float32)
    print(
        f"torch {torch.__version__}, {threads} thread(s) ({why}), fp32 matmul peak here: "
        f"{peak / 1e9:.1f} GFLOP/s, batch {BATCH} x {SEQ}, vocabulary {VOCAB}"
    )
    rows, cold = [], {}
    check = batches(3)
    for d in dims:
        programs = {"reference": reference(d), "ours": ours(d, False)}
        # The same losses for the first steps (depth 4), before any timing.
        losses = {name: [p(b, 4, i) for i, b in enumerate(check)] for name, p in programs.items()}
        gap = max(abs(a - b) for a, b in zip(losses["reference"], losses["ours"], strict=True))
        print(
            f"d={d}: first 3 losses, reference {losses['reference']}, ours {losses['ours']}; "
            f"largest difference {gap:.1e}"
        )
        assert gap < 1e-5, "the two programs do not compute the same thing"
        programs = {"reference": reference(d), "ours": ours(d, False)}
        compiled = ours(d, True)
        t0 = time.perf_counter()
        compiled(check[0], 4, 0)
        cold[d] = time.perf_counter() - t0
        programs["ours, compiled"] = compiled
        data = batches(2)
        for depth in depths:
            for p in programs.values():  # warm-up at this depth
                p(data[0], depth, 0)
            times: dict[str, list[float]] = {name: [] for name in programs}
            for r in range(args.repeats):
                for name, p in programs.items():
                    times[name].append(timed(p, data[r % 2], depth, r + 1))
            rows.append((d, depth, times))
    print(
        "\n| d | K | reference s/step | ours s/step | ours / reference | compiled s/step "
        "| compiled / reference |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for d, depth, times in rows:
        med = {name: statistics.median(v) for name, v in times.items()}
        ratio = {
            name: statistics.median(o / r for o, r in zip(v, times["reference"], strict=True))
            for name, v in times.items()
        }
        print(
            f"| {d} | {depth} | {med['reference']:.3f} | {med['ours']:.3f} | "
            f"{ratio['ours']:.2f} | {med['ours, compiled']:.3f} | "
            f"{ratio['ours, compiled']:.2f} |"
        )
    print("\n| d | cold start of the compiled step (first step, fresh cache) |")
    print("| --- | --- |")
    for d, seconds in cold.items():
        print(f"| {d} | {seconds:.1f} s |")
    print("\n| d | K | program | model GFLOP/s | MFU |")
    print("| --- | --- | --- | --- | --- |")
    for d, depth, times in rows:
        if depth != 4:
            continue
        step_flops = BATCH * SEQ * flop_model(model_config(d), SEQ).train(depth)
        for name, v in times.items():
            rate = step_flops / statistics.median(v)
            print(f"| {d} | {depth} | {name} | {rate / 1e9:.1f} | {100 * rate / peak:.1f}% |")


if __name__ == "__main__":
    main()
