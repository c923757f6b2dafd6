"""The memory model of a transformers looped architecture (Inkling2Loop): what one process holds
while it finishes such a model at depth K, from its config.json alone.

The same moments as our own model's (compute/memory.py): state (fp32 weights, the trained
weights' gradients and AdamW moments, divided under FSDP2, whose root unit holds the looped
layers and is gathered in fp32 for the whole step), the activations a micro-batch keeps for its
backward, and the transients at the loss, in the backward and at the optimizer step. The state
is counted exactly (the parameters of the architecture built on the meta device, with peft's
adapters for a low-rank run). The activations are not derived by hand: the architecture's
eager attention, relative-position bias, attention residuals, messages between passes and
experts keep dozens of tensors per layer, so what each layer application keeps is a linear
function of its dimensions (`layer_features`) whose coefficients are fitted from the tensors
saved for the backward in small CPU forwards (benchmarks/looped_memory.py --fit, committed as
`looped_memory_fit.json`); the peaks it predicts are checked against measured peaks at sizes the
fit never saw (docs/design.md §15).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fixedfirst.compute.memory import FP32, INDEX, Placement, TrainingMemory, ceil_div
from fixedfirst.config import LowRankConfig

FIT_FILE = Path(__file__).with_name("looped_memory_fit.json")
"""The fitted coefficients (benchmarks/looped_memory.py --fit writes it)."""

LAYER_FEATURES = (
    "n*d",
    "n*d*blocks",
    "n*d*boundary",
    "n*heads*head_dim",
    "n*kv_heads*head_dim",
    "n*heads*extent",
    "n*heads*T",
    "n*heads",
    "n*top_k*expert_width",
    "n*top_k*d",
    "n*top_k",
    "n*experts",
    "n*gate_rank",
    "rows*T*T",
    "expert parameters",
    "other parameters",
)
"""What one application of a decoder layer keeps, per feature: n tokens (rows x T), width d,
the attention residual blocks it reads, its heads, the relative extent (the window of a
sliding layer, rel_extent of a full one), the T keys each query scores (eager attention), the
experts each token visits and the router's scores."""
MESSAGE_FEATURES = ("n*d*loop_blocks", "n*d")
"""What reading one layer's messages from the previous pass keeps."""
MODEL_FEATURES = ("n*vocab", "n*d", "n*d*blocks", "rows*T*T", "n")
"""What the embedding, the masks, the final attention residual, norm, head and loss keep."""


@dataclass(frozen=True)
class LayerShape:
    """One decoder layer, as its activations see it."""

    sliding: bool
    looped: bool
    after_loop: bool
    heads: int
    kv_heads: int
    head_dim: int
    extent: int
    blocks: int
    """Attention residual blocks in the states it reads."""
    boundary: bool
    """Whether it closes a block (it stacks its input onto the block states)."""
    parameters: int
    expert_parameters: int
    """Its experts' stacked weights (a low-rank run adapts them in every application)."""


@dataclass(frozen=True)
class LoopedShape:
    """What the memory model reads of an Inkling2Loop configuration and its parameters."""

    hidden: int
    vocab: int
    experts: int
    top_k: int
    expert_width: int
    gate_rank: int
    """The rank of the message gates between passes."""
    layers: tuple[LayerShape, ...]
    final_blocks: int
    loop_blocks: int
    parameters: int
    """Every weight the process holds: the architecture's, and a low-rank run's adapters."""
    trained: int
    """Parameters a step trains: every one, or a low-rank run's adapters."""
    root: int
    """FSDP2's root unit: everything but the decoder layers outside the loop."""
    embedding: int
    readout: int
    """The layers after the loop, the final attention residual, norm and head: their gradients
    exist before the loop's backward begins."""
    core: int
    """The looped layers and the message reads: their gradients are written by the loop's
    backward."""
    largest_trained: int
    """The largest trained tensor (AdamW's temporaries on the CPU are its size)."""

    @property
    def looped(self) -> list[LayerShape]:
        return [layer for layer in self.layers if layer.looped]

    @property
    def once(self) -> list[LayerShape]:
        return [layer for layer in self.layers if not layer.looped]


def looped_shape(
    architecture: str, options: dict[str, Any], lowrank: LowRankConfig | None
) -> LoopedShape:
    """The shape of the configuration `options`, its parameters counted on the meta device."""
    key = json.dumps(options, sort_keys=True)
    adapters = None if lowrank is None else json.dumps(lowrank.__dict__, sort_keys=True)
    return cached_shape(architecture, key, adapters)


@functools.cache
def cached_shape(architecture: str, options: str, lowrank: str | None) -> LoopedShape:
    import torch

    from fixedfirst.config.architectures import (
        build_configuration,
        looped_architecture,
        model_class,
        quiet_transformers,
    )
    from fixedfirst.model.lowrank import apply_lowrank

    looped = looped_architecture(architecture)
    c = build_configuration(looped, json.loads(options))
    with quiet_transformers(), torch.device("meta"):
        network = model_class(looped)(c)
    per_layer = [sum(p.numel() for p in layer.parameters()) for layer in network.model.layers]
    total = sum(p.numel() for p in network.parameters())
    embedding = sum(p.numel() for p in network.model.embed_tokens.parameters())
    outside = total - sum(per_layer)  # embedding, message reads, final residual, norm, head
    start, end = c.loop_layer_index_start, c.loop_layer_index_end
    if lowrank is not None:
        with torch.device("meta"):
            network = apply_lowrank(network, LowRankConfig(**json.loads(lowrank)))
    trained = [p.numel() for p in network.parameters() if p.requires_grad]
    s = c.n_layers_per_attn_res_block
    layers = []
    for i, kind in enumerate(c.layer_types):
        sliding = kind == "hybrid_sliding"
        layers.append(
            LayerShape(
                sliding=sliding,
                looped=start <= i < end,
                after_loop=i >= end,
                heads=c.swa_num_attention_heads if sliding else c.num_attention_heads,
                kv_heads=c.swa_num_key_value_heads if sliding else c.num_key_value_heads,
                head_dim=c.swa_head_dim if sliding else c.head_dim,
                extent=c.sliding_window_size if sliding else c.rel_extent,
                blocks=math.ceil(i / s),
                boundary=i % s == 0,
                parameters=per_layer[i],
                expert_parameters=3 * c.n_routed_experts * c.moe_intermediate_size * c.hidden_size,
            )
        )
    return LoopedShape(
        hidden=c.hidden_size,
        vocab=c.unpadded_vocab_size,
        experts=c.n_routed_experts,
        top_k=c.num_experts_per_tok,
        expert_width=c.moe_intermediate_size,
        gate_rank=c.loop_gate_rank,
        layers=tuple(layers),
        final_blocks=math.ceil(c.num_hidden_layers / s),
        loop_blocks=math.ceil((end - start) / s),
        parameters=total + (sum(trained) if lowrank is not None else 0),
        trained=sum(trained),
        root=total - sum(n for n, layer in zip(per_layer, layers, strict=True) if not layer.looped),
        embedding=embedding,
        readout=sum(per_layer[end:]) + outside - embedding,
        core=sum(per_layer[start:end]),
        largest_trained=max(trained),
    )


def layer_features(shape: LoopedShape, layer: LayerShape, rows: int, seq_len: int) -> list[float]:
    n, d = rows * seq_len, shape.hidden
    return [
        n * d,
        n * d * layer.blocks,
        n * d * layer.boundary,
        n * layer.heads * layer.head_dim,
        n * layer.kv_heads * layer.head_dim,
        n * layer.heads * layer.extent,
        n * layer.heads * seq_len,
        n * layer.heads,
        n * shape.top_k * shape.expert_width,
        n * shape.top_k * d,
        n * shape.top_k,
        n * shape.experts,
        n * shape.gate_rank,
        rows * seq_len * seq_len,
        layer.expert_parameters,
        layer.parameters - layer.expert_parameters,
    ]


def message_features(shape: LoopedShape, rows: int, seq_len: int) -> list[float]:
    n = rows * seq_len
    return [n * shape.hidden * shape.loop_blocks, n * shape.hidden]


def model_features(shape: LoopedShape, rows: int, seq_len: int) -> list[float]:
    n = rows * seq_len
    return [
        n * shape.vocab,
        n * shape.hidden,
        n * shape.hidden * shape.final_blocks,
        rows * seq_len**2,
        n,
    ]


def copy_features(shape: LoopedShape, applications: list[LayerShape]) -> list[float]:
    """What autocast's weight copies scale with: each layer's weights once (a trained weight's
    copy is cached for the forward) or at every application (a frozen one's is not), experts
    and the rest apart, and the embedding and head."""
    experts = [layer.expert_parameters for layer in shape.layers]
    others = [layer.parameters - layer.expert_parameters for layer in shape.layers]
    return [
        sum(experts),
        sum(others),
        sum(layer.expert_parameters for layer in applications),
        sum(layer.parameters - layer.expert_parameters for layer in applications),
        shape.vocab * shape.hidden,
    ]


def layer_kind(layer: LayerShape, messages: bool) -> str:
    """The fitted coefficients' key: attention kind and whether messages arrive (passes >= 2)."""
    return f"{'sliding' if layer.sliding else 'full'}{', messages' if messages else ''}"


def fit_key(bf16: bool, lowrank: bool) -> str:
    return f"{'bf16' if bf16 else 'fp32'} {'low-rank' if lowrank else 'full'}"


@functools.cache
def fitted() -> dict[str, Any]:
    return json.loads(FIT_FILE.read_text())


def dot(coefficients: Sequence[float], features: Sequence[float]) -> float:
    return sum(c * f for c, f in zip(coefficients, features, strict=True))


@dataclass(frozen=True)
class LoopedActivations:
    """Bytes a micro-batch keeps for its backward, by where they are kept."""

    layers: float
    """Every decoder layer application (checkpointed: their inputs)."""
    messages: float
    model: float
    """Embedding, masks, final attention residual, norm, head, logits and loss."""
    copies: float
    """autocast's bf16 copies of the weights."""
    recomputed: tuple[tuple[LayerShape, float], ...]
    """Checkpointed: the layer applications in the order the backward recomputes them (those
    after the loop, then the loop's last pass), each with what it keeps (else empty)."""
    after_loop: float
    """What the layers after the loop keep: freed before the loop's backward."""

    @property
    def total(self) -> float:
        return self.layers + self.messages + self.model + self.copies


def activations(
    shape: LoopedShape,
    bf16: bool,
    lowrank: bool,
    rows: int,
    seq_len: int,
    depth: int,
    checkpoint: bool,
) -> LoopedActivations:
    """What a forward of `rows` sequences at `depth` keeps for its backward."""
    fit = fitted()["fits"][fit_key(bf16, lowrank)]
    n, d = rows * seq_len, shape.hidden
    applications = [(layer, False) for layer in shape.once]
    applications += [(layer, False) for layer in shape.looped]
    applications += [(layer, True) for layer in shape.looped for _ in range(depth - 1)]
    kept = [
        dot(fit["layer"][layer_kind(layer, m)], layer_features(shape, layer, rows, seq_len))
        for layer, m in applications
    ]
    messages = (
        len(shape.looped)
        * (depth - 1)
        * dot(fit["message"], message_features(shape, rows, seq_len))
    )
    model = dot(fit["model"], model_features(shape, rows, seq_len))
    copies = (
        dot(fit["copies"], copy_features(shape, [layer for layer, _ in applications]))
        if bf16
        else 0.0
    )
    after = sum(k for k, (layer, _) in zip(kept, applications, strict=True) if layer.after_loop)
    if not checkpoint:
        return LoopedActivations(sum(kept), messages, model, copies, (), after)
    # A checkpointed layer keeps its inputs: the fp32 stream, the block states it reads (each
    # boundary's stack a tensor of its own) and, from the second pass on, its four messages.
    stream = FP32 * n * d * len(applications)
    stacks = FP32 * n * d * sum(layer.blocks + 1 for layer, _ in applications if layer.boundary)
    inbox = FP32 * 4 * n * d * len(shape.looped) * (depth - 1)
    after = FP32 * n * d * sum(layer.after_loop for layer, _ in applications)
    last = len(applications) - len(shape.looped)  # the loop's last pass
    # autocast's copies of a layer's weights are made inside the checkpointed layer and freed
    # with it: only the head's stay; the layer being recomputed makes its own again.
    head_copies = fit["copies"][4] * shape.vocab * shape.hidden if bf16 else 0.0
    once, each = fit["copies"][:2], fit["copies"][2:4]

    def recast(layer: LayerShape) -> float:
        parts = [layer.expert_parameters, layer.parameters - layer.expert_parameters]
        return dot(once, parts) + dot(each, parts) if bf16 else 0.0

    pairs = [(layer, k + recast(layer)) for (layer, _), k in zip(applications, kept, strict=True)]
    recomputed = tuple(reversed([p for p in pairs if p[0].after_loop])) + tuple(
        reversed(pairs[last:])
    )
    inputs = stream + stacks + inbox
    return LoopedActivations(inputs, messages, model, head_copies, recomputed, after)


def looped_training_memory(
    shape: LoopedShape,
    placement: Placement,
    lowrank: bool,
    micro_batch: int,
    seq_len: int,
    depth: int,
    checkpoint: bool,
    micro_steps: int = 1,
) -> TrainingMemory:
    """Per-process memory of a training step at `depth`: `micro_steps` micro-batches of
    `micro_batch` sequences of `seq_len` tokens, their gradients accumulated (fp32 weights;
    bf16 autocast when `placement.bf16`)."""
    shards = placement.shards
    acts = activations(shape, placement.bf16, lowrank, micro_batch, seq_len, depth, checkpoint)
    weights = FP32 * ceil_div(shape.parameters, shards)
    optimizer = 2 * FP32 * ceil_div(shape.trained, shards)
    gradients = FP32 * ceil_div(shape.trained, shards)
    n = micro_batch * seq_len
    batch = 2 * INDEX * n * micro_steps
    # The loss's backward: the gradients of the log-softmax and of the fp32 logits.
    loss = 2 * FP32 * n * shape.vocab
    # DDP's buckets: a second copy of the trained gradients, allocated when it wraps the model.
    buckets = FP32 * shape.trained if placement.strategy == "ddp" else 0
    # Accumulating: from the second micro-batch on every trained gradient exists, unsharded
    # (FSDP2 reduce-scatters only after the last one, train/parallel.py's gradient_sync).
    accumulated = FP32 * shape.trained if micro_steps > 1 else 0
    held = weights + optimizer + batch + buckets
    if placement.strategy == "fsdp":
        # The root unit (the looped layers with the embedding and head) is gathered in fp32 for
        # the whole step; one outer layer at a time with the next prefetched.
        outer = max((layer.parameters for layer in shape.once), default=0)
        held += FP32 * (shape.root + 2 * outer) - FP32 * ceil_div(shape.root, shards)
        # The root's gradients (the loop's, the head's) stay unsharded until the backward ends;
        # the layers after the loop reduce-scatter theirs as their backward ends.
        after_share = 1 / shards
    else:
        after_share = 1.0
    head = shape.readout - sum(x.parameters for x in shape.layers if x.after_loop)
    # The trained share of a weight's gradient (a low-rank run's adapters in proportion).
    trained = FP32 * shape.trained / shape.parameters
    at_loss = held + accumulated + acts.total + loss
    if acts.recomputed:
        # Checkpointed: the backward recomputes one layer application at a time, the gradients
        # of the head and of the layers it has passed already written.
        written, moments = float(head), []
        for layer, kept in acts.recomputed:
            moments.append(kept + max(accumulated, trained * written))
            written += layer.parameters * (after_share if layer.after_loop else 1.0)
        at_core = held + acts.total - acts.model + max(moments)
    else:
        # When the backward reaches the loop: the readout's and the loop's gradients written,
        # the readout's activations freed.
        written = head + sum(x.parameters for x in shape.layers if x.after_loop) * after_share
        written += shape.core
        at_core = held + acts.total - acts.model - acts.after_loop
        at_core += max(accumulated, trained * written)
    # AdamW on each process's shards: on CUDA one fp32 temporary of every moment, on the CPU
    # two of the largest tensor; FSDP2 has resharded the root by then.
    temporary = FP32 * (
        ceil_div(shape.trained, shards) if placement.device == "cuda" else 2 * shape.largest_trained
    )
    at_step = weights + optimizer + batch + buckets + gradients + temporary
    peak = max(at_loss, at_core, at_step)
    held_gradients = max(gradients, accumulated) + buckets
    return TrainingMemory(weights, held_gradients, optimizer, round(acts.total), round(peak))
