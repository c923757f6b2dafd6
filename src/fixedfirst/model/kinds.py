"""The model a run's `[model]` names, built and sized: the one place that tells apart
fixedfirst's own looped transformer and a transformers looped architecture.

Everything downstream works on the `LoopedLM` these build (the trainer's and evaluation's model
interface, model/interface.py); its compute model is `compute.plan.run_cost`. What a run of a
transformers architecture cannot have of our own model's features is refused with its
configuration (config/run.py), or, for a command that only serves our model, by
`RunConfig.own_model`.
"""

from __future__ import annotations

import torch

from fixedfirst.config import ModelSection, RunConfig, TransformersModelConfig
from fixedfirst.model import transformers_loop
from fixedfirst.model.looped import LoopedTransformer
from fixedfirst.model.lowrank import apply_lowrank
from fixedfirst.model.memory import check_fits
from fixedfirst.model.pretrained import load_own_export
from fixedfirst.model.transformers_loop import TransformersLoop

LoopedModel = LoopedTransformer | TransformersLoop
"""A model a run's [model] names: a `LoopedLM` to train and evaluate, a `LoopedDecoder` to
serve (model/serving.py)."""


def build_model(model: ModelSection) -> LoopedModel:
    """The model on the CPU, initialised from the global random state (seed it first; moved to
    a device after, its weights are the same everywhere), refused in one line when its weights
    alone would not fit in memory. A checkpoint [model] names is not read: this is the shape
    that a run's own checkpoints load into (`initial_model` starts a run)."""
    if isinstance(model, TransformersModelConfig):
        return transformers_loop.build(model)
    check_fits(model, torch.device("cpu"))
    return LoopedTransformer(model)


def initial_model(model: ModelSection) -> LoopedModel:
    """The model a run starts from, on the CPU: with `checkpoint`, the weights of that
    directory (model/pretrained.py); otherwise `build_model`'s initialisation."""
    if model.checkpoint is None:
        return build_model(model)
    if isinstance(model, TransformersModelConfig):
        return transformers_loop.from_checkpoint(model)
    return load_own_export(model)


def build_run_model(config: RunConfig) -> LoopedModel:
    """The model a run trains, as its first step finds it: `initial_model` (the checkpoint
    [model] names, or weights initialised from `train.seed`: the same on every rank and in
    every process that rebuilds it), with low-rank adapters when `[train.lowrank]` asks for them
    (model/lowrank.py; the base weights then frozen)."""
    torch.manual_seed(config.train.seed)
    model = initial_model(config.model)
    if config.train.lowrank is not None:
        if not isinstance(model, TransformersLoop):  # refused with the configuration
            raise ValueError("low-rank adapters are for a transformers looped architecture")
        model.network = apply_lowrank(model.network, config.train.lowrank)
    return model


def parameter_counts(model: ModelSection) -> dict[str, int]:
    """Parameters per part of our model (embedding, prelude, core, coda, head, total); of a
    transformers architecture, the total. Counted on the meta device: no memory, no init."""
    if isinstance(model, TransformersModelConfig):
        return {"total": transformers_loop.parameter_count(model)}
    with torch.device("meta"):
        return LoopedTransformer(model).parameter_counts()


def foreign_model_note(model: ModelSection) -> str | None:
    """A line for the run's log about a model that is not ours (None for ours, whose shape its
    config.toml says): which, how large, what of ours it goes without, and the checkpoint it
    starts from (for ours too)."""
    start = (
        ""
        if model.checkpoint is None
        else f" from the checkpoint {model.checkpoint} (trained at depth "
        f"{model.checkpoint_depth}, weights SHA-256 {str(model.checkpoint_sha256)[:16]}...)"
    )
    if not isinstance(model, TransformersModelConfig):
        return None if not start else f"model: fixedfirst's looped transformer{start}"
    total = transformers_loop.parameter_count(model)
    return (
        f"model: transformers' {model.architecture}{start}, {total:,} parameters; depth set by "
        "its depth handle at every step; NLL by depth one forward per depth; memory not "
        "estimated (the memory model is of fixedfirst's own model)"
    )
