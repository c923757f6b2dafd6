"""`train.precision = "fast"`: bf16 autocast exactly where this device multiplies bf16 faster."""

from __future__ import annotations

import math

import pytest
import torch

from fixedfirst.config import RunConfig
from fixedfirst.errors import UserError
from fixedfirst.machine import device as hardware


@pytest.mark.parametrize(
    ("speedup", "dtype"), [(4.4, torch.bfloat16), (1.2, torch.float32), (0.3, torch.float32)]
)
def test_fast_takes_bf16_only_where_it_is_measured_faster(monkeypatch, speedup, dtype):
    monkeypatch.setattr(hardware, "bf16_speedup", lambda device_type: speedup)
    assert hardware.resolve_dtype("fast", torch.device("cpu")) == dtype
    assert hardware.resolve_dtype("auto", torch.device("cpu")) == torch.float32  # unchanged
    assert hardware.resolve_dtype("fp32", torch.device("cpu")) == torch.float32


def test_bf16_speedup_is_a_measured_ratio():
    """A positive, finite ratio: far below 1 where bf16 is emulated (no AVX512-BF16 or AMX, as on
    some of the machines this runs on: 0.002-0.015 seen there), above 1 where it is native."""
    ratio = hardware.bf16_speedup("cpu", n=256)
    assert math.isfinite(ratio) and 0 < ratio < 100
    assert hardware.bf16_speedup("cpu", n=256) == ratio  # measured once per process


def test_fast_is_a_valid_precision_and_others_are_not():
    assert RunConfig.from_dict({"train": {"precision": "fast"}}).train.precision == "fast"
    with pytest.raises(UserError, match="train.precision"):
        RunConfig.from_dict({"train": {"precision": "fastest"}})
