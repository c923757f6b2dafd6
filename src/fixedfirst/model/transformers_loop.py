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
from fixedfirst.model.handles import depth_handle
from fixedfirst.model.interface import LoopedLM
from fixedfirst.model.kv_cache import FULL_CACHE, CacheStrategy
from fixedfirst.model.looped import check_depth
from fixedfirst.model.loss import next_token_loss
from fixedfirst.model.memory import check_count_fits
from fixedfirst.model.pass_cache import PassCache


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

    # -- serving (model/serving.py): decoding steps through a cache, at any depth -------------

    @property
    def max_seq_len(self) -> int:
        return int(
            getattr(self.network.config, looped_architecture(self.architecture).positions_key)
        )

    @property
    def readout_between_passes(self) -> str:
        """Why no exit rule can stop between this model's passes."""
        return looped_architecture(self.architecture).no_readout

    def new_cache(
        self,
        max_depth: int | None = None,
        pad: torch.Tensor | None = None,
        strategy: CacheStrategy = FULL_CACHE,
        rollback: bool = False,
    ) -> PassCache:
        """A cache with every pass's layers up to `max_depth` (model/pass_cache.py), of a batch
        left-padded by `pad`; `rollback`: it can drop its last columns (speculation)."""
        if strategy != FULL_CACHE:
            raise UserError(
                f"--cache {strategy.name}: a cache strategy bounds the core entries of "
                f"fixedfirst's own looped transformer; transformers' {self.architecture} keeps "
                "one cache layer per loop pass (use --cache full)"
            )
        if max_depth is None:
            raise ValueError("a transformers model's cache is built for a max_depth")
        self.handle.set_depth(check_depth(max_depth))  # refuses a depth the model cannot run
        architecture = looped_architecture(self.architecture)
        return PassCache(self.network.config, architecture.loop_keys, max_depth, pad, rollback)

    @torch.inference_mode()
    def decode_step(self, tokens: torch.Tensor, depth: int, cache: PassCache) -> torch.Tensor:
        """Process the next tokens (B, T) after what `cache` holds, `depth` passes each; return
        their logits. A step below the cache's depth shows later tokens its last pass's entries
        at the passes it did not run (model/pass_cache.py). Inference mode, not only no_grad:
        the same steps under no_grad took 1.12-1.14x the CPU time (docs/log.md, 2026-12-07); the
        cache's tensors are then inference tensors, which `PassCache.truncate` edits in
        inference mode too."""
        cache.check_depth(depth)
        self.handle.set_depth(depth)
        inputs = cache.inputs(tokens.shape[1])
        logits = self.network(
            input_ids=tokens, cache=cache.transformers_cache, use_cache=True, **inputs
        ).logits
        cache.carry_forward(depth, tokens.shape[1])
        cache.length += tokens.shape[1]
        return logits


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
