"""Depth handles: how a training loop sets the depth of a looped model it did not build.

Every looped model takes its depth in its own way: ours as a `forward` argument, our Hugging Face
export from `config.depth`, transformers' Inkling2Loop models from `config.loop_num_passes`, read
at each forward. A `DepthHandle` hides which: `set_depth(k)` makes the model's next forwards run
k loop passes, and refuses, in one line, a depth the model cannot run. `depth_handle(model)`
finds the handle of a model it knows; any other model plugs in with the name of its forward's
depth argument (`depth_handle(model, forward_kwarg="num_steps")`, a Huginn-style model) or one
small function (`depth_handle(model, set_depth=...)`).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import nn

from fixedfirst.config.architectures import architecture_module, architecture_of_type
from fixedfirst.config.limits import MAX_DEPTH
from fixedfirst.errors import UserError
from fixedfirst.model.looped import LoopedTransformer, check_depth


class DepthHandle(Protocol):
    """Sets the number of loop passes a model's next forwards run."""

    def set_depth(self, depth: int) -> None: ...


class ForwardArgumentDepth:
    """A model whose `forward` takes its depth as an argument: our `LoopedTransformer`
    (`forward(tokens, depth)`) or a Huginn-style model (`forward(input_ids, num_steps=None)`,
    which draws its own depth when given none). A forward pre-hook supplies the argument to calls
    that leave it out (or pass None); a call that gives one keeps its own, as evaluation at a
    chosen depth does."""

    def __init__(self, model: nn.Module, name: str = "depth") -> None:
        parameters = inspect.signature(model.forward).parameters
        if name not in parameters:
            raise UserError(
                f"{type(model).__name__}.forward has no argument {name!r} (its arguments: "
                f"{', '.join(parameters)}); give forward_kwarg the name of the one that sets its "
                "number of loop passes"
            )
        self.name = name
        positional = [
            p.name
            for p in parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        self.position = positional.index(name) if name in positional else None
        """Where the argument comes among the positional ones (the pre-hook sees those without
        `self`), None when it is keyword-only."""
        self.depth: int | None = None
        # First in line: of several handles on one model, the newest supplies the depth.
        self.hook = model.register_forward_pre_hook(self.supply, with_kwargs=True, prepend=True)

    def set_depth(self, depth: int) -> None:
        self.depth = check_depth(depth)

    def supply(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        at = self.position
        if at is not None and len(args) > at:  # given positionally: None asks for the handle's
            if args[at] is None:
                args = (*args[:at], self.supplied(), *args[at + 1 :])
        elif kwargs.get(self.name) is None:
            kwargs = {**kwargs, self.name: self.supplied()}
        return args, kwargs

    def supplied(self) -> int:
        if self.depth is None:
            raise UserError("the depth handle has no depth yet: call set_depth before forward")
        return self.depth

    def remove(self) -> None:
        """Take the hook off the model (forwards need their depth again)."""
        self.hook.remove()


class ConfigDepth:
    """A model whose forwards read their depth from a configuration attribute: our Hugging Face
    export (`config.depth`) and transformers' Inkling2Loop models (`loop_num_passes` of each text
    configuration the model holds: its own, or a multimodal model's `text_config`)."""

    def __init__(self, configs: list[Any], key: str, model_name: str, loops: str = "") -> None:
        self.configs, self.key, self.model_name = configs, key, model_name
        self.loops = loops
        """Empty, or why the model loops nothing (then it runs depth 1 only)."""

    def set_depth(self, depth: int) -> None:
        if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_DEPTH:
            raise UserError(
                f"{self.model_name} cannot run depth {depth!r}: its {self.key} must be an "
                f"integer in 1..{MAX_DEPTH}"
            )
        if self.loops and depth > 1:
            raise UserError(
                f"{self.model_name} cannot run depth {depth}: {self.loops}, so every depth "
                "computes depth 1; loop at least one layer"
            )
        for config in self.configs:
            setattr(config, self.key, depth)


class FunctionDepth:
    """Any other model: a function that sets its depth (and raises for one it cannot run)."""

    def __init__(self, set_depth: Callable[[int], None]) -> None:
        self.set_depth = set_depth


def depth_handle(
    model: nn.Module,
    set_depth: Callable[[int], None] | None = None,
    forward_kwarg: str | None = None,
) -> DepthHandle:
    """The handle that sets `model`'s depth: `set_depth` when given; the forward argument named
    `forward_kwarg`, supplied by a forward pre-hook; else the one for a model fixedfirst knows
    (a DistributedDataParallel wrapper is looked through)."""
    if set_depth is not None and forward_kwarg is not None:
        raise UserError("give depth_handle set_depth=FUNCTION or forward_kwarg=NAME, not both")
    if set_depth is not None:
        if not callable(set_depth):
            raise UserError(f"set_depth must be a function of the depth, got {set_depth!r}")
        return FunctionDepth(set_depth)
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        model = model.module
    if forward_kwarg is not None:
        return ForwardArgumentDepth(model, forward_kwarg)
    if isinstance(model, LoopedTransformer):
        return ForwardArgumentDepth(model, "depth")
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    name = type(model).__name__
    if model_type == "fixedfirst":  # our export, loaded with trust_remote_code
        return ConfigDepth([model.config], "depth", name)
    architecture = architecture_of_type(model_type)
    if architecture is not None:
        text_model = getattr(architecture_module(architecture), architecture.text_model)
        configs = [m.config for m in model.modules() if isinstance(m, text_model)]
        configs = list({id(c): c for c in configs}.values())
        start_key, end_key = architecture.loop_keys
        empty = [c for c in configs if getattr(c, end_key) <= getattr(c, start_key)]
        loops = (
            f"it loops no layer ({start_key} = {getattr(empty[0], start_key)}, "
            f"{end_key} = {getattr(empty[0], end_key)})"
            if empty
            else ""
        )
        return ConfigDepth(configs, architecture.depth_key, name, loops)
    raise UserError(
        f"no depth handle for {name}: fixedfirst sets the depth of LoopedTransformer, its "
        "Hugging Face export and transformers' looped architectures (config/architectures.py); "
        "name its forward's depth argument (depth_handle(model, forward_kwarg='num_steps')) or "
        "give depth_handle(model, set_depth=FUNCTION) a function that sets this model's depth"
    )


def checked_handle(handle: Any, where: str) -> DepthHandle:
    """`handle` if it is a depth handle; a model given where its handle goes is refused in one
    line that says how to make one (`where` names the argument)."""
    if callable(getattr(handle, "set_depth", None)):
        return typing.cast(DepthHandle, handle)
    if isinstance(handle, nn.Module):
        raise UserError(
            f"{where} is the model {type(handle).__name__}, not a depth handle: wrap it, "
            "depth_handle(model) (or depth_handle(model, forward_kwarg=NAME) for a model whose "
            "forward takes its depth)"
        )
    raise UserError(f"{where} must be a depth handle (depth_handle(model)), got {handle!r}")
