"""Benchmark: one-pass evaluation at depths 1..16 against 16 separate forwards, and training speed.

    .venv/bin/python benchmarks/depth_eval.py [--repeats 7]

Prints two tables. The first times `nll_by_depth(depths=1..16)` against 16 separate eval forwards
(the naive way) on the same batch; the ratio is median(separate) / median(one pass). The second
times a full training step (forward, backward, AdamW) at depths 1, 4 and 16 and reports tokens/s
and MFU against this machine's measured fp32 matmul peak. Medians over repeats, measured side by
side in one run.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from fixedfirst.compute.flops import flop_model
from fixedfirst.config import ModelConfig
from fixedfirst.machine.device import measured_peak_flops
from fixedfirst.model import LoopedTransformer


def median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=128)
    args = parser.parse_args()
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=2048, d_model=128, n_heads=4, max_seq_len=args.seq_len)
    model = LoopedTransformer(config)
    B, T = args.batch, args.seq_len
    x = torch.randint(0, config.vocab_size, (B, T + 1))
    inputs, targets = x[:, :-1], x[:, 1:]
    depths = list(range(1, 17))
    counts = model.parameter_counts()
    print(f"model: d={config.d_model}, 1+{config.n_core}xK+1 layers, {counts['total'] / 1e6:.2f}M")
    print(f"batch {B} x {T} tokens, torch {torch.__version__}, {torch.get_num_threads()} threads")

    model.eval()

    def one_pass():
        model.nll_by_depth(inputs, targets, depths)

    @torch.no_grad()
    def separate():
        for d in depths:
            F.cross_entropy(model(inputs, d).flatten(0, 1), targets.flatten()).item()

    t_one = median_seconds(one_pass, args.repeats)
    t_sep = median_seconds(separate, args.repeats)
    print("\n| evaluation at depths 1..16 | median s | speed-up |")
    print("| --- | --- | --- |")
    print(f"| 16 separate forwards | {t_sep:.3f} | 1.00x |")
    print(f"| nll_by_depth (one pass) | {t_one:.3f} | {t_sep / t_one:.2f}x |")

    peak = measured_peak_flops("cpu", torch.float32)
    fm = flop_model(config, T)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(depth):
        def run():
            loss = F.cross_entropy(model(inputs, depth).flatten(0, 1), targets.flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        return run

    print(f"\nmeasured fp32 matmul peak: {peak / 1e9:.1f} GFLOP/s")
    print("| training depth | median s/step | tokens/s | model GFLOP/s | MFU |")
    print("| --- | --- | --- | --- | --- |")
    for depth in (1, 4, 16):
        t = median_seconds(step(depth), args.repeats)
        tok_s = B * T / t
        achieved = tok_s * fm.train(depth)
        print(
            f"| {depth} | {t:.3f} | {tok_s:,.0f} | {achieved / 1e9:.1f} | "
            f"{100 * achieved / peak:.1f}% |"
        )


if __name__ == "__main__":
    main()
