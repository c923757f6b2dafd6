"""Tiny training configurations and helpers shared by the trainer tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
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


@dataclass
class ObservedRun:
    """A finished run and what the model and optimizer did in it, observed from outside the
    trainer: how many times the core ran in training mode before each optimizer step, the
    learning rate each step used, and every checkpoint written (step, tags)."""

    path: Path
    config: RunConfig
    summary: dict[str, Any]
    core_calls: list[int] = field(default_factory=list)
    lrs: list[float] = field(default_factory=list)
    saves: list[tuple[int, list[str]]] = field(default_factory=list)

    @property
    def depths_run(self) -> list[int]:
        """The depth each step ran at: core calls / (micro-batches x core layers)."""
        t, model = self.config.train, self.config.model
        per_depth = (t.batch_size // t.micro_batch()) * model.n_core
        assert all(calls % per_depth == 0 for calls in self.core_calls), self.core_calls
        return [calls // per_depth for calls in self.core_calls]


def observe_training(config: RunConfig, out: Path) -> ObservedRun:
    """Train `config` to the end in `out`, counting the core's training-mode calls per step (a
    hook on every core block, so a depth the model did not run cannot hide behind the logs)."""
    from fixedfirst.train.trainer import Trainer

    trainer = Trainer(config, out, quiet=True)
    observed = ObservedRun(Path(out), config, {})
    calls = [0]

    def count(module, args) -> None:
        if module.training:
            calls[0] += 1

    for block in trainer.model.core:
        block.register_forward_pre_hook(count)

    def before_step(optimizer, args, kwargs) -> None:
        observed.core_calls.append(calls[0])
        observed.lrs.append(optimizer.param_groups[0]["lr"])
        calls[0] = 0

    trainer.optimizer.register_step_pre_hook(before_step)
    save = trainer.checkpoints.save

    def recording_save(step, weights, state, meta, tags):
        observed.saves.append((step, sorted(set(tags))))
        return save(step, weights, state, meta, tags)

    trainer.checkpoints.save = recording_save
    observed.summary = trainer.train()
    return observed


def fixed_first_uniform_depths(seed: int, k0: int, switch: float, k_max: int, total: int):
    """The documented rule, written out independently of `Schedule`: K0 while step < switch x
    total (decimal arithmetic, no float round-off), then K ~ U{1..k_max} drawn by a generator
    seeded with (seed, step)."""
    from fractions import Fraction

    boundary = Fraction(str(switch)) * total
    return [
        k0 if step < boundary else int(np.random.default_rng([seed, step]).integers(1, k_max + 1))
        for step in range(total)
    ]
