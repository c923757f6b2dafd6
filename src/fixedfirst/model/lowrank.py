"""Low-rank adapters (LoRA, through peft) on a transformers looped architecture: `[train.lowrank]`.

`apply_lowrank` freezes the network's weights and wraps it in a peft model whose adapters alone
train. A looped layer is one module run at every pass, so peft gives it one adapter, which every
pass shares as it shares the layer. `merge_lowrank` folds the adapters into the base weights and
returns the plain transformers model (hand-back); `save_adapters` writes the adapters alone in
peft's format (`adapter_config.json`, `adapter_model.safetensors`). `base_identity` is the
SHA-256 of the frozen weights: a low-rank run's checkpoints hold the adapters and name the base
they were trained on by it, so that a resume or an evaluation on other base weights is refused
instead of silently computing something else. peft is optional (`fixedfirst[lowrank]`) and
imported only here, only when adapters are asked for.
"""

from __future__ import annotations

import hashlib
import importlib
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fixedfirst.config import LowRankConfig
from fixedfirst.errors import UserError

EXTRA = "pip install 'fixedfirst[lowrank]'"
PEFT_FLOOR = "0.18.0"
"""The oldest peft release the tests passed on (pyproject.toml's `lowrank` extra)."""


def require_peft() -> Any:
    """The peft module, or one line naming the extra that installs it."""
    try:
        return importlib.import_module("peft")
    except ImportError:
        raise UserError(
            f"train.lowrank (low-rank adapters) needs peft >= {PEFT_FLOOR}, which is not "
            f"installed: {EXTRA}"
        ) from None


def apply_lowrank(network: nn.Module, config: LowRankConfig) -> nn.Module:
    """`network` with LoRA adapters on `config.targets` and `config.parameters` (each name must
    match a module, resp. a parameter, by the end of its path), every other weight frozen. The
    adapters start at zero: the result computes what `network` computes."""
    peft = require_peft()
    modules = [name for name, _ in network.named_modules()]
    parameters = [name for name, _ in network.named_parameters()]
    described = type(network).__name__
    for key, what, names, present in (
        ("targets", "module", config.targets, modules),
        ("parameters", "parameter", config.parameters, parameters),
    ):
        for name in names:
            if not any(path == name or path.endswith("." + name) for path in present):
                raise UserError(
                    f"train.lowrank.{key}: {name!r} matches no {what} of {described} (a name "
                    "matches the end of a path, e.g. 'q_proj.linear')"
                )
    lora = peft.LoraConfig(
        r=config.rank,
        lora_alpha=config.alpha,
        target_modules=list(config.targets) or None,
        target_parameters=list(config.parameters) or None,
        lora_dropout=0.0,
        bias="none",
    )
    try:
        with warnings.catch_warnings():  # peft asks for transformers' renamed property
            warnings.filterwarnings("ignore", "`is_gradient_checkpointing`", FutureWarning)
            return peft.get_peft_model(network, lora)
    except (ValueError, TypeError) as e:  # a module type peft cannot adapt
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"train.lowrank: peft cannot adapt {described} so ({first})") from None


def is_lowrank(network: nn.Module) -> bool:
    """Whether `network` carries peft adapters (`apply_lowrank`'s result; none can where peft
    was never imported)."""
    peft = sys.modules.get("peft")
    return peft is not None and isinstance(network, peft.PeftModel)


def merge_lowrank(network: nn.Module) -> nn.Module:
    """The adapters folded into the base weights: the plain transformers model (the class
    `apply_lowrank` was given), without peft, for hand-back. `network` is consumed."""
    if not is_lowrank(network):
        raise ValueError(f"{type(network).__name__} carries no low-rank adapters to merge")
    merged: nn.Module = network.merge_and_unload()  # type: ignore[operator]
    for p in merged.parameters():
        p.requires_grad_(True)
    return merged


def save_adapters(network: nn.Module, directory: str | Path) -> Path:
    """The adapters alone in peft's format (`adapter_config.json`, `adapter_model.safetensors`
    in `directory`), loadable by `peft.PeftModel.from_pretrained(base, directory)`."""
    if not is_lowrank(network):
        raise ValueError(f"{type(network).__name__} carries no low-rank adapters to save")
    path = Path(directory)
    network.save_pretrained(str(path))  # type: ignore[operator]
    return path


def frozen_names(module: nn.Module) -> set[str]:
    """The parameters no step trains (a low-rank run's base weights): checkpoints leave them out."""
    return {name for name, p in module.named_parameters() if not p.requires_grad}


def base_identity(module: nn.Module) -> str | None:
    """SHA-256 of the frozen parameters (names, dtypes, shapes and bytes, in name order), or None
    when every parameter trains. Computed on full, unsharded tensors (before FSDP2 shards them)."""
    frozen = sorted((name, p) for name, p in module.named_parameters() if not p.requires_grad)
    if not frozen:
        return None
    digest = hashlib.sha256()
    for name, p in frozen:
        tensor = p.detach().to("cpu").contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        data: Any = tensor.reshape(-1).view(torch.uint8).numpy()  # hashed in place, no copy
        digest.update(data)
    return digest.hexdigest()
