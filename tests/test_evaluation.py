"""Validation NLL over several batches is the NLL of all their scored tokens together."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fixedfirst.data.source import Batch
from fixedfirst.evaluation.nll import mean_serving_nll, validation_nll
from fixedfirst.model import LoopedTransformer
from tests.conftest import tiny_model_config


def test_validation_nll_weights_batches_by_scored_tokens():
    torch.manual_seed(0)
    model = LoopedTransformer(tiny_model_config()).eval()
    inputs = torch.randint(0, 61, (2, 3, 10))
    targets = torch.randint(0, 61, (2, 3, 10))
    targets[1, :, 2:] = -100  # the second batch scores 6 tokens, the first 30
    batches = [Batch(inputs[0], targets[0]), Batch(inputs[1], targets[1])]
    got = validation_nll(model, batches, [1, 3], torch.device("cpu"))
    for depth in (1, 3):
        with torch.no_grad():
            logits = torch.cat([model(b.inputs, depth).flatten(0, 1) for b in batches])
        flat = torch.cat([b.targets.flatten() for b in batches])
        expected = F.cross_entropy(logits, flat, ignore_index=-100).item()
        assert got[depth] == pytest.approx(expected, rel=1e-5)
    # Weighting each batch equally would give a different number here.
    with torch.no_grad():
        means = [
            F.cross_entropy(
                model(b.inputs, 1).flatten(0, 1), b.targets.flatten(), ignore_index=-100
            ).item()
            for b in batches
        ]
    assert abs(got[1] - sum(means) / 2) > 1e-4


def test_mean_serving_nll_is_the_mean_over_depths_1_to_16():
    measured = {d: float(d) for d in range(1, 19)} | {32: 100.0, 64: 200.0}
    assert mean_serving_nll(measured) == 8.5  # (1 + ... + 16) / 16, depths beyond left out
    del measured[16]
    assert mean_serving_nll(measured) is None  # not every serving depth was measured
