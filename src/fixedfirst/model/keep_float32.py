"""The modules a transformers architecture keeps in float32, kept there under bf16 autocast.

A transformers model names the weights that must stay float32 whatever dtype it is loaded in
(`_keep_in_fp32_modules_strict`: Inkling2Loop's routers and their correction biases, its short
convolutions, the attention residuals that read the block states, the message gates' output
projections). Stored weights are not enough under autocast: a bf16 run keeps every weight in
float32 and autocast still computes a float32 module's matrix products in bf16. So each module
owning such a weight runs with autocast off and its floating inputs cast to float32, and its
computation is float32 as the architecture declares; the rest of the model computes under
autocast. transformers matches the names against weight names (a name matches where it occurs
in a path); the module kept is the outermost one the match reaches, or the weight's owner.
Outside autocast (fp32 runs, evaluation in fp32) the hooks change nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle


def declared_float32(network: nn.Module) -> list[str]:
    """The names `network`'s class declares float32 whatever the dtype (what transformers keeps
    in float32 when it loads a model in bf16)."""
    names: set[str] = set()
    for module in network.modules():
        names.update(getattr(module, "_keep_in_fp32_modules_strict", None) or ())
    return sorted(names)


def float32_modules(network: nn.Module, names: Iterable[str]) -> list[str]:
    """The paths of the modules to run in float32: for every parameter or buffer whose path
    contains one of `names`, the shortest module path that covers the match (the weight's owner
    when the match reaches into the weight's own name); outermost only."""
    listed = [re.escape(name) for name in names]
    if not listed:
        return []
    pattern = re.compile("|".join(listed))
    found: set[str] = set()
    for path, _ in [*network.named_parameters(), *network.named_buffers()]:
        match = pattern.search(path)
        if match is None:
            continue
        owner = path.split(".")[:-1]
        covered = len(owner)
        for i in range(1, len(owner) + 1):
            if len(".".join(owner[:i])) >= match.end():
                covered = i
                break
        found.add(".".join(owner[:covered]))
    return sorted(p for p in found if not any(p.startswith(q + ".") for q in found))


class Float32Under:
    """Forward hooks that turn autocast off around one module and cast its floating inputs to
    float32 (only while autocast is on)."""

    def __init__(self) -> None:
        self.entered: list[torch.autocast | None] = []

    def before(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        tensors = [a for a in (*args, *kwargs.values()) if torch.is_tensor(a)]
        device = tensors[0].device.type if tensors else "cpu"
        if not torch.is_autocast_enabled(device):
            self.entered.append(None)
            return args, kwargs
        off = torch.autocast(device_type=device, enabled=False)
        off.__enter__()
        self.entered.append(off)
        return tuple(map(upcast, args)), {k: upcast(v) for k, v in kwargs.items()}

    def after(self, module: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        off = self.entered.pop()
        if off is not None:
            off.__exit__(None, None, None)


def upcast(value: Any) -> Any:
    if torch.is_tensor(value) and value.is_floating_point() and value.dtype != torch.float32:
        return value.float()
    return value


def keep_float32(network: nn.Module) -> list[RemovableHandle]:
    """Hook every module `network` declares float32 (`float32_modules`); returns the hooks'
    handles (`remove()` each to undo)."""
    modules = dict(network.named_modules())
    handles = []
    for path in float32_modules(network, declared_float32(network)):
        hooks = Float32Under()
        module = modules[path]
        handles.append(module.register_forward_pre_hook(hooks.before, with_kwargs=True))
        handles.append(
            module.register_forward_hook(hooks.after, with_kwargs=True, always_call=True)
        )
    return handles
