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
from fixedfirst.errors import UserError
from fixedfirst.files.paths import shown
from fixedfirst.model.handles import depth_handle
from fixedfirst.model.interface import LoopedLM
from fixedfirst.model.keep_float32 import keep_float32
from fixedfirst.model.kv_cache import FULL_CACHE, CacheStrategy
from fixedfirst.model.looped import check_depth
from fixedfirst.model.loss import next_token_loss
from fixedfirst.model.lowrank import is_lowrank
from fixedfirst.model.memory import check_count_fits
from fixedfirst.model.pass_cache import PassCache
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
