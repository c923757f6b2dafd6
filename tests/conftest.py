"""Shared fixtures: tiny models that run in milliseconds on a CPU."""

from __future__ import annotations

import pytest
import torch

from fixedfirst.config import ModelConfig
from fixedfirst.model import LoopedTransformer


def tiny_model_config(**overrides) -> ModelConfig:
    values = dict(vocab_size=61, d_model=32, n_heads=4, n_prelude=1, n_core=2, n_coda=1)
    values["max_seq_len"] = 96
    values.update(overrides)
    return ModelConfig(**values)


@pytest.fixture
def tiny_model() -> LoopedTransformer:
    torch.manual_seed(0)
    return LoopedTransformer(tiny_model_config()).eval()
