"""A transformers looped architecture, trained and scored by fixedfirst's own commands.

`[model] kind = "transformers"` (config/architectures.py) names the model class and its
configuration. `build` makes the model and wraps it as a `LoopedLM`, the shape our trainer and
evaluation call: `forward(tokens, depth)` sets the depth through the model's depth handle
(model/handles.py) and returns its logits, and scoring several depths is one forward per depth,
since the model has no readout between its passes. What follows from the architecture: a step
may leave parameters without a gradient (at one pass, Inkling2Loop's message gates and the query
that reads the previous pass), so DDP looks for them; it is never compiled (Inkling2Loop
declares it cannot compile as one graph, and fixedfirst compiles only its own model's loop); the
modules it declares float32 stay float32 under bf16 autocast (model/keep_float32.py), so FSDP2
gathers its weights in float32 and autocast alone computes in bf16; activation checkpointing is
the model's own (each decoder layer recomputed in the backward); and under FSDP2 each layer
outside the loop is a unit of its own, the looped layers staying with the root as our core
does. Low-rank adapters replace `network` by peft's wrapper of it (model/lowrank.py). Its
compute model is measured (compute/measured.py).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

from fixedfirst.config import TransformersModelConfig
from fixedfirst.config.architectures import (
    architecture_module,
    build_configuration,
    compiles_as_one_graph,
    looped_architecture,
    model_class,
    quiet_transformers,
)
from fixedfirst.model.handles import depth_handle
from fixedfirst.model.interface import LoopedLM
from fixedfirst.model.keep_float32 import keep_float32
from fixedfirst.model.loss import next_token_loss
from fixedfirst.model.lowrank import is_lowrank
from fixedfirst.model.memory import check_count_fits


class TransformersLoop(LoopedLM):
    """A transformers looped model (`network`) called as fixedfirst calls its own."""

    def __init__(self, network: nn.Module, architecture: str) -> None:
        super().__init__()
        self.network = network
        self.architecture = architecture
        self.handle = depth_handle(network)
        configuration: Any = network.config  # a transformers PretrainedConfig
        self.vocab_size = int(configuration.vocab_size)
        self.leaves_parameters_unused = True
        self.gathers_in_bf16 = False
        why = "declares it cannot compile as one graph"
        if compiles_as_one_graph(architecture):
            why = "is not one of fixedfirst's own models, whose loop alone it compiles"
        self.never_compiled = f"transformers' {architecture} {why}"
        self.float32_hooks = keep_float32(network)
        self.checkpointing = False

    def forward(
        self,
        tokens: torch.Tensor,
        depth: int,
        grad_depth: int | None = None,
        state_seeds: Sequence[int] | None = None,
        checkpoint: bool = False,
    ) -> torch.Tensor:
        """Logits after `depth` loop passes. The model has no random initial state, so
        `state_seeds` changes nothing; truncated backprop is refused with the configuration
        (config/run.py), never reaches here. `checkpoint`: the model's own activation
        checkpointing, in training (`set_checkpointing`)."""
        if grad_depth is not None:
            raise ValueError("truncated backprop is a feature of fixedfirst's own model")
        if checkpoint != self.checkpointing:
            self.set_checkpointing(checkpoint)
        self.handle.set_depth(depth)
        return self.network(input_ids=tokens, use_cache=False).logits

    @property
    def transformers_model(self) -> nn.Module:
        """The transformers model itself (inside peft's wrapper when adapters train)."""
        if is_lowrank(self.network):
            return self.network.get_base_model()  # type: ignore[operator]
        return self.network

    def set_checkpointing(self, enabled: bool) -> None:
        """Activation checkpointing through the model's own switch (non-reentrant): in a
        training forward each decoder layer keeps its inputs only and runs again in the
        backward, every pass of a looped layer a checkpointed call of its own."""
        model: Any = self.transformers_model
        # transformers 5.25 renamed gradient_checkpointing_* (kept as deprecated aliases)
        if enabled:
            enable = getattr(model, "activation_checkpointing_enable", None)
            if enable is not None:
                enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                model.gradient_checkpointing_enable({"use_reentrant": False})
        else:
            disable = getattr(model, "activation_checkpointing_disable", None)
            (disable if disable is not None else model.gradient_checkpointing_disable)()
        self.checkpointing = enabled

    def once_per_forward(self) -> list[nn.Module]:
        """The decoder layers outside the loop: each runs once per forward (the looped layers
        run at every pass)."""
        architecture = looped_architecture(self.architecture)
        text_class = getattr(architecture_module(architecture), architecture.text_model)
        start_key, end_key = architecture.loop_keys
        blocks: list[nn.Module] = []
        for text in self.network.modules():
            if isinstance(text, text_class):
                start, end = getattr(text.config, start_key), getattr(text.config, end_key)
                blocks += [b for i, b in enumerate(text.layers) if not start <= i < end]
        return blocks

    @torch.no_grad()
    def row_nll_by_depth(
        self, tokens: torch.Tensor, targets: torch.Tensor, depths: Iterable[int]
    ) -> tuple[dict[int, float], dict[int, torch.Tensor]]:
        """One forward per depth: the mean NLL and each row's summed NLL."""
        means, rows = {}, {}
        for depth in dict.fromkeys(depths):
            logits = self(tokens, depth)
            means[depth] = next_token_loss(logits, targets).item()
            per_token = next_token_loss(logits, targets, reduction="none")
            rows[depth] = per_token.view(targets.shape).sum(dim=1)
        return means, rows

    @torch.no_grad()
    def logits_by_depth(
        self, tokens: torch.Tensor, depths: Iterable[int]
    ) -> Iterator[tuple[int, torch.Tensor]]:
        """One forward per depth, ascending."""
        for depth in sorted(set(depths)):
            yield depth, self(tokens, depth)

    def nll_by_depth(
        self, tokens: torch.Tensor, targets: torch.Tensor, depths: Iterable[int]
    ) -> dict[int, float]:
        return self.row_nll_by_depth(tokens, targets, depths)[0]

    def compile_loop(self) -> None:
        raise ValueError(f"{self.never_compiled}; the trainer runs it eagerly")


def build(config: TransformersModelConfig) -> TransformersLoop:
    """The model of `config` on the CPU, initialised by transformers from the global random
    state."""
    architecture = looped_architecture(config.architecture)
    configuration = build_configuration(architecture, config.options)
    described = f"transformers' {config.architecture}"
    check_count_fits(lambda: parameter_count(config), described, torch.device("cpu"))
    with quiet_transformers():
        network = model_class(architecture)(configuration)
    return TransformersLoop(network, config.architecture)


def parameter_count(config: TransformersModelConfig) -> int:
    """The model's parameters, counted on the meta device (no memory, no initialisation)."""
    return _parameter_count(config.architecture, json.dumps(config.options, sort_keys=True))


@functools.cache
def _parameter_count(architecture: str, options: str) -> int:
    looped = looped_architecture(architecture)
    configuration = build_configuration(looped, json.loads(options))
    with quiet_transformers(), torch.device("meta"):
        network = model_class(looped)(configuration)
    return sum(p.numel() for p in network.parameters())
