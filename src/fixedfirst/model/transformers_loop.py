"""A transformers looped architecture, trained and scored by fixedfirst's own commands.

`[model] kind = "transformers"` (config/architectures.py) names the model class and its
configuration. `build` makes the model and wraps it as a `LoopedLM`, the shape our trainer and
evaluation call: `forward(tokens, depth)` sets the depth through the model's depth handle
(model/handles.py) and returns its logits, and scoring several depths is one forward per depth,
since the model has no readout between its passes. Two declarations follow from the architecture: a
step may leave parameters without a gradient (at one pass, Inkling2Loop's message gates and
the query that reads the previous pass), so DDP looks for them; and it is never compiled
(Inkling2Loop declares it cannot compile as one graph, and fixedfirst compiles only its own
model's loop). Its compute
model is measured (compute/measured.py).
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
    build_configuration,
    compiles_as_one_graph,
    looped_architecture,
    model_class,
    quiet_transformers,
)
from fixedfirst.errors import UserError
from fixedfirst.files.paths import shown
from fixedfirst.model.handles import depth_handle
from fixedfirst.model.interface import LoopedLM
from fixedfirst.model.loss import next_token_loss
from fixedfirst.model.memory import check_count_fits
from fixedfirst.model.pretrained import weight_files


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
        why = "declares it cannot compile as one graph"
        if compiles_as_one_graph(architecture):
            why = "is not one of fixedfirst's own models, whose loop alone it compiles"
        self.never_compiled = f"transformers' {architecture} {why}"

    def forward(
        self,
        tokens: torch.Tensor,
        depth: int,
        grad_depth: int | None = None,
        state_seeds: Sequence[int] | None = None,
        checkpoint: bool = False,
    ) -> torch.Tensor:
        """Logits after `depth` loop passes. The model has no random initial state, so
        `state_seeds` changes nothing; truncated backprop and activation checkpointing are
        refused with the configuration (config/run.py), never reach here."""
        if grad_depth is not None or checkpoint:
            raise ValueError("truncated backprop and activation checkpointing are ours only")
        self.handle.set_depth(depth)
        return self.network(input_ids=tokens, use_cache=False).logits

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


def from_checkpoint(config: TransformersModelConfig) -> TransformersLoop:
    """The model of `config` with the weights of its checkpoint directory, on the CPU in
    float32, loaded by the architecture's own `from_pretrained` (which converts the names and
    layouts it saves under, streaming the shards into a model built without initialisation);
    weights the checkpoint lacks, or holds in another shape, are refused in one line rather than
    initialised at random."""
    assert config.checkpoint is not None
    directory = config.checkpoint
    weight_files(directory)  # a missing or truncated shard is one line before anything loads
    architecture = looped_architecture(config.architecture)
    configuration = build_configuration(architecture, config.options)
    described = f"transformers' {config.architecture}"
    check_count_fits(lambda: parameter_count(config), described, torch.device("cpu"))
    try:
        with quiet_transformers():
            network, info = model_class(architecture).from_pretrained(
                directory,
                config=configuration,
                dtype=torch.float32,
                local_files_only=True,
                output_loading_info=True,
            )
    except (OSError, ValueError, RuntimeError, KeyError) as e:
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        raise UserError(
            f"model.checkpoint = {shown(directory)}: transformers cannot load it "
            f"({lines[0] if lines else type(e).__name__})"
        ) from None
    problems = [f"{k} missing" for k in sorted(info["missing_keys"])]
    problems += [
        f"{k[0] if isinstance(k, tuple) else k} of another shape"
        for k in sorted(info["mismatched_keys"])
    ]
    if problems:
        raise UserError(
            f"model.checkpoint = {shown(directory)}: its weights do not fit the model its "
            f"config.json describes ({'; '.join(problems[:3])}); transformers would initialise "
            "them at random: copy the checkpoint again, or save it whole with save_pretrained"
        )
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
