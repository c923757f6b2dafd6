"""Tiny training configurations and helpers shared by the trainer tests."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

from fixedfirst.config import RunConfig, load_config

TINY_TOML = """
[model]
vocab_size = 48
d_model = 32
n_heads = 4
n_prelude = 1
n_core = 1
n_coda = 1
max_seq_len = 32

[schedule]
kind = "fixed-first"
k0 = 2
switch = 0.5
k_max = 6

[train]
tokens = 6144
batch_size = 8
micro_batch_size = 4
seq_len = 16
lr = 3e-3
warmup = 0.1
log_every = 1
checkpoint_every = 4
keep_checkpoints = 2

[eval]
depths = [1, 2, 4]
batches = 1
"""


def write_tiny_config(directory: Path, extra: str = "") -> Path:
    path = directory / "tiny.toml"
    path.write_text(TINY_TOML + extra)
    return path


def tiny_config(*overrides: str) -> RunConfig:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        return load_config(write_tiny_config(Path(d)), list(overrides))


def final_weights(run: Path) -> dict[str, torch.Tensor]:
    steps = sorted((run / "checkpoints").glob("step-*"))
    return load_file(steps[-1] / "model.safetensors")


def train_records(run: Path) -> list[dict]:
    from fixedfirst.train.metrics import read_metrics

    return read_metrics(run / "metrics.jsonl", "train")


def comparable(records: list[dict]) -> list[tuple]:
    """What must match between an uninterrupted and a resumed run (wall-clock may not)."""
    return [(r["step"], r["depth"], r["phase"], r["loss"], r["lr"], r["flops"]) for r in records]
