"""Shared fixtures: tiny models that run in milliseconds on a CPU."""

from __future__ import annotations

import os

import pytest
import torch

import fixedfirst.tasks  # noqa: F401  (registers the tasks' data kinds, as the CLI does)
from fixedfirst.config import ModelConfig
from fixedfirst.machine.device import PEAK_FLOPS_ENV
from fixedfirst.model import LoopedTransformer

LONGEST_MODULES = (
    "test_distributed.py",
    "test_foreign_training.py",
    "test_first_run.py",
    "test_gpu_questions.py",
    "test_bios_experiment.py",
    "test_side_by_side.py",
    "test_foreign_lowrank.py",
    "test_checkpoint_finish.py",
    "test_warm_up.py",
    "test_hard_edges.py",
    "test_study_configs.py",
    "test_inspect.py",
    "test_chains_experiment.py",
    "test_hf_export.py",
    "test_sweep_seeds.py",
    "test_auto_switch.py",
    "test_training_at_scale.py",
    "test_ablation.py",
    "test_memory_model.py",
    "test_compute.py",
    "test_factor_study.py",
    "test_speculative.py",
    "test_crash.py",
    "test_trainer.py",
    "test_speed_settings.py",
    "test_harness.py",
    "test_cache_strategies.py",
    "test_checkpoint_load.py",
)
"""The modules that cost most (CPU seconds of the test process and the processes it starts,
about 65 down to 10), run first: `make test` hands whole modules to two workers as they free up,
and starting with the longest lets both finish together instead of one waiting on the other's
last long module (the rest, a few seconds each, follow in file order)."""


def pytest_configure(config):
    """Every run the tests train (here and in the processes they start) measures its MFU against
    a given peak instead of timing matmuls for half a second of CPU first: the tests check what
    MFU is computed from, not this machine's peak (tests/test_speed_settings.py measures it)."""
    os.environ.setdefault(PEAK_FLOPS_ENV, "1e11")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: order kept within


def tiny_model_config(**overrides) -> ModelConfig:
    values = dict(vocab_size=61, d_model=32, n_heads=4, n_prelude=1, n_core=2, n_coda=1)
    values["max_seq_len"] = 96
    values.update(overrides)
    return ModelConfig(**values)


@pytest.fixture
def tiny_model() -> LoopedTransformer:
    torch.manual_seed(0)
    return LoopedTransformer(tiny_model_config()).eval()


TEXT_RUN_TOML = """
[model]
vocab_size = 257
d_model = 32
n_heads = 4
n_prelude = 1
n_core = 1
n_coda = 1
max_seq_len = 64

[schedule]
kind = "fixed-first"
k0 = 2
switch = 0.5
k_max = 6

[train]
tokens = 4096
batch_size = 8
seq_len = 64
lr = 3e-3
log_every = 4

[data]
kind = "tokens"
path = "data"

[eval]
depths = [1, 4]
batches = 1
"""


@pytest.fixture(scope="session")
def text_run(tmp_path_factory):
    """A tiny byte-level language-model run (8 steps on generated sentences), for serving tests:
    returns the directory holding `data/` and `run/` (the run's data.path is absolute)."""
    import os

    import numpy as np

    from fixedfirst.config import load_config
    from fixedfirst.data.prepare import PrepareOptions, prepare
    from fixedfirst.train.trainer import Trainer

    root = tmp_path_factory.mktemp("text-run")
    rng = np.random.default_rng(0)
    words = ["the", "river", "stone", "lamp", "orbit", "cedar", "quartz", "violet", "harbor"]
    documents = [" ".join(rng.choice(words, size=rng.integers(6, 20))) for _ in range(200)]
    (root / "corpus.txt").write_text("\n%\n".join(documents) + "\n")
    (root / "run.toml").write_text(TEXT_RUN_TOML)
    before = os.getcwd()
    os.chdir(root)
    try:
        prepare(["corpus.txt"], "data", PrepareOptions(separator="%", val_fraction=0.1))
        config = load_config("run.toml", [f'data.path="{root / "data"}"'])
        Trainer(config, "run", quiet=True).train()
    finally:
        os.chdir(before)
    return root


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """The tiny trainer configuration (tests/trainer_helpers.py) trained once to the end, every
    checkpoint kept (48 steps, switch at 24, a checkpoint every 4), with what the model and
    optimizer did at every step observed (`ObservedRun`). The reference of the resume, crash and
    fault tests (keep_checkpoints changes no weight or metric). Read-only: tests that damage or
    extend a run copy it or train their own."""
    from tests.trainer_helpers import observe_training, tiny_config

    config = tiny_config("train.keep_checkpoints=100")
    return observe_training(config, tmp_path_factory.mktemp("tiny-run") / "run")
