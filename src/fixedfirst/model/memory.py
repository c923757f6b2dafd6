"""Whether a model's weights fit in memory for serving, decided before a single one is allocated.

A configuration with a typo (d_model = 655360) would otherwise ask torch for terabytes and fail
with an allocator traceback, or swap the machine to a halt. The parameters are counted on the
meta device (no memory) and their fp32 bytes compared with the device's memory. Training asks
more (gradients, AdamW, activations): train/memory_check.py checks it with the memory model.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from fixedfirst.config import ModelConfig
from fixedfirst.errors import UserError

GIB = 1 << 30

BYTES_SERVING = 4
"""fp32 weights, per parameter."""


def parameter_count(config: ModelConfig) -> int:
    from fixedfirst.model.looped import LoopedTransformer

    with torch.device("meta"):
        return LoopedTransformer(config).parameter_counts()["total"]


def device_memory(device: torch.device) -> int | None:
    """Bytes of memory on `device` (the physical memory for the CPU); None if unknown."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_fits(config: ModelConfig, device: torch.device) -> None:
    """Refuse, in one line, a model whose weights alone do not fit on `device`."""
    described = f"model.d_model = {config.d_model}, vocab_size = {config.vocab_size}"
    check_count_fits(lambda: parameter_count(config), described, device)


def check_count_fits(count_of: Callable[[], int], described: str, device: torch.device) -> None:
    """`check_fits` for a model of `count_of()` parameters, `described` in the message."""
    available = device_memory(torch.device(device))
    if available is None:
        return
    count = count_of()
    need = count * BYTES_SERVING
    if need > available:
        raise UserError(
            f"the model has {count / 1e9:,.2f}B parameters ({described}); its weights alone "
            f"need {need / GIB:,.0f} GiB, more than this {torch.device(device).type}'s memory; "
            "make the model smaller"
        )
