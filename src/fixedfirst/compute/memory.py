"""The memory model: what one process holds while it trains a looped transformer at depth K.

State (weights, gradients, AdamW's moments, divided under FSDP2), the activations a micro-batch
keeps for its backward (linear in K; one state per iteration under checkpointing) and what
exists only for a moment; the peak is the largest of the moments at which these coincide.
Counted in bytes of tensors, as torch's own counters report; docs/design.md §15 derives every
term and says how it was checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fixedfirst.compute.flops import layer_matmul_params
from fixedfirst.compute.plan import RunPlan
from fixedfirst.config import ModelConfig

FP32 = 4
BF16 = 2
INDEX = 8
"""Bytes of a token id (int64), inputs and targets alike."""
MARGIN = 0.10
"""The share of a device's memory an estimate must leave free, for what is not a tensor (the
CUDA context, allocator fragmentation) and what the model does not count. A choice, not a
measurement; the first run on a GPU (benchmarks/first_run.py) reports what the allocator reserved
beyond the tensors."""


@dataclass(frozen=True)
class Placement:
    """How a process trains: what decides the bytes besides the model and the micro-batch."""

    device: Literal["cpu", "cuda"] = "cpu"
    bf16: bool = False
    """bf16 autocast (the fp32 weights stay; FSDP2 then gathers them in bf16)."""
    strategy: Literal["single", "ddp", "fsdp"] = "single"
    processes: int = 1

    @property
    def compute(self) -> int:
        """Bytes of an element the matmuls produce."""
        return BF16 if self.bf16 else FP32

    @property
    def norm_keeps_normalised(self) -> bool:
        """F.rms_norm is one fused kernel on CUDA, keeping its input and 1/rms for the backward;
        elsewhere it is composed of elementwise ops and also keeps x/rms (measured on CPU)."""
        return self.device != "cuda"

    @property
    def gathers_bf16(self) -> bool:
        """FSDP2 computes with bf16 copies of the weights: autocast then copies nothing."""
        return self.bf16 and self.strategy == "fsdp"

    @property
    def shards(self) -> int:
        return self.processes if self.strategy == "fsdp" else 1


@dataclass(frozen=True)
class Parameters:
    """Parameter counts by where FSDP2 puts them (train/parallel.py): one unit per prelude and
    coda block, everything else (embedding, adapter, core, norms, head) in the root unit."""

    root: int
    block: int
    """One prelude or coda block."""
    blocks: int
    """How many prelude and coda blocks."""
    core: int
    """The adapter and the core's layers: their gradients exist from the core's backward on."""
    readout: int
    """Core norm, coda, final norm and head: their gradients exist before the core's."""
    largest: int
    """The largest single tensor (AdamW's temporaries on CPU are its size)."""

    @property
    def total(self) -> int:
        return self.root + self.blocks * self.block


def parameters(model: ModelConfig) -> Parameters:
    d, v = model.d_model, model.vocab_size
    norms = (4 if model.norm == "sandwich" else 2) * d
    block = layer_matmul_params(model) + norms
    adapter = 2 * d * d if model.injection == "concat" else 0
    embedding = v * d
    head = 0 if model.tie_embeddings else v * d
    core = adapter + model.n_core * block
    final_norms = (2 if model.coda_norm else 1) * d
    up_rows = (2 if model.mlp == "swiglu" else 1) * model.hidden_size
    return Parameters(
        root=embedding + head + core + final_norms,
        block=block,
        blocks=model.n_prelude + model.n_coda,
        core=core,
        readout=final_norms + model.n_coda * block + head + (embedding if not head else 0),
        largest=max(embedding, 3 * d * d, up_rows * d, adapter),
    )


@dataclass(frozen=True)
class TrainingMemory:
    """Bytes one process holds while training; `peak` is what it needs."""

    parameters: int
    gradients: int
    """The most gradient storage held at once (DDP's buckets included)."""
    optimizer: int
    activations: int
    """Kept for the backward at the deepest depth, logits and autocast's weight copies included."""
    peak: int


def layer_bytes_per_token(model: ModelConfig, placement: Placement, stream: int) -> int:
    """What one application of a layer keeps for its backward, per token. `stream`: bytes of an
    element of the residual stream it reads (fp32, or bf16 inside a concat-injected core under
    autocast, where the adapter's matmul hands the core a bf16 state)."""
    d, h, c = model.d_model, model.hidden_size, placement.compute
    norms = 4 if model.norm == "sandwich" else 2
    # Each norm keeps its input in fp32 and 1/rms per token (and x/rms where composed).
    norm = FP32 * d * (2 if placement.norm_keeps_normalised else 1) + FP32
    # qkv's input, its whole output (the v view keeps it), rotated q and k, the attention
    # output (also out's input) and the attention's logsumexp per head.
    attention = c * d + 3 * c * d + 2 * c * d + c * d + FP32 * model.n_heads
    # The MLP's input: autocast casts an fp32 input once per matmul (gate and value: twice).
    casts = 2 if (stream == FP32 and c == BF16 and model.mlp == "swiglu") else 1
    mlp_inner = (4 if model.mlp == "swiglu" else 2) * c * h  # gate, value, silu, product
    return norms * norm + attention + casts * c * d + mlp_inner


def layer_bytes_per_sequence(model: ModelConfig, placement: Placement, seq_len: int) -> int:
    """What one application keeps that does not grow with the batch: the rotary tables q and k
    were turned by (complex64), and under autocast the bf16 copies of SwiGLU's gate and value
    weights (slices of one parameter, which autocast's weight cache does not hold)."""
    rotary = 2 * seq_len * (model.head_dim // 2) * 8
    casts = 0
    if placement.bf16 and not placement.gathers_bf16 and model.mlp == "swiglu":
        casts = BF16 * 2 * model.hidden_size * model.d_model
    return rotary + casts


def weight_copies(model: ModelConfig, placement: Placement) -> int:
    """autocast's bf16 copies of the leaf weights, made once per forward and kept by the backward
    (none in fp32, none under FSDP2 whose gathered weights are already bf16)."""
    if not placement.bf16 or placement.gathers_bf16:
        return 0
    d, h = model.d_model, model.hidden_size
    per_layer = 4 * d * d + h * d * (1 if model.mlp == "swiglu" else 2)  # qkv, out, down (+ up)
    layers = model.n_prelude + model.n_core + model.n_coda
    adapter = d * d if model.injection == "concat" else 0  # the prelude half, once
    return BF16 * (layers * per_layer + model.vocab_size * d + adapter)


@dataclass(frozen=True)
class Activations:
    """Bytes kept for the backward of one micro-batch, by where they are freed."""

    prelude: int
    """Embedding, prelude and the injection: freed last."""
    core: int
    """Every iteration with gradients (checkpointed: their input states)."""
    iteration: int
    """One iteration's activations (what a checkpointed backward recomputes at a time)."""
    readout: int
    """Core norm, coda, final norm, head input, logits and log-softmax: freed first."""

    @property
    def total(self) -> int:
        return self.prelude + self.core + self.readout


def activations(
    model: ModelConfig,
    placement: Placement,
    rows: int,
    seq_len: int,
    depth: int,
    grad_depth: int | None = None,
    checkpoint: bool = False,
) -> Activations:
    """What a forward of `rows` sequences at `depth` keeps for its backward (docs/design.md §15)."""
    n, d, c = rows * seq_len, model.d_model, placement.compute
    concat = model.injection == "concat"
    # The residual stream starts as the embedding's output (fp32, or bf16 under FSDP2's bf16
    # weights); a concat core reads the adapter's matmul output, in the compute dtype.
    prelude_stream = c if placement.gathers_bf16 else FP32
    core_stream = c if concat else prelude_stream
    graded = depth if grad_depth is None else min(depth, grad_depth)

    def layers(count: int, stream: int) -> int:
        per_token = layer_bytes_per_token(model, placement, stream)
        return count * (n * per_token + layer_bytes_per_sequence(model, placement, seq_len))

    adapter_slice = (
        BF16 * d * d if (placement.bf16 and concat and not placement.gathers_bf16) else 0
    )
    iteration = layers(model.n_core, core_stream) + (n * c * d + adapter_slice if concat else 0)
    # The injection's linear keeps the prelude output (concat); `add` keeps nothing.
    prelude = layers(model.n_prelude, prelude_stream) + (n * c * d if concat else 0)
    if checkpoint:
        # Each iteration keeps its input state; the first one's is the fp32 initial state. The
        # injection is a checkpoint input too, kept once (every iteration shares it).
        injection = n * (c if concat else FP32) * d
        core = n * d * (graded * core_stream + FP32 - core_stream) + injection
    else:
        core = graded * iteration
    norm = n * (FP32 * d * (2 if placement.norm_keeps_normalised else 1) + FP32)
    readout = (
        (norm if model.coda_norm else 0)
        + layers(model.n_coda, core_stream)
        + norm  # the final norm
        + n * c * d  # the head's input
        + n * (c + FP32) * model.vocab_size  # logits (the step still holds them), log-softmax
    )
    return Activations(prelude, core, iteration, readout)


def training_memory(
    model: ModelConfig,
    placement: Placement,
    micro_batch: int,
    micro_steps: int,
    seq_len: int,
    depth: int,
    grad_depth: int | None = None,
    checkpoint: bool = False,
) -> TrainingMemory:
    """Per-process memory of a training step at `depth` with micro-batches of `micro_batch`
    sequences, `micro_steps` of them per step (gradients accumulate between them)."""
    p = parameters(model)
    shards = placement.shards
    weights = FP32 * ceil_div(p.total, shards)
    optimizer = 2 * weights
    acts = activations(model, placement, micro_batch, seq_len, depth, grad_depth, checkpoint)
    copies = weight_copies(model, placement)
    n, v = micro_batch * seq_len, model.vocab_size
    batch = 2 * INDEX * micro_batch * micro_steps * seq_len
    # The loss's backward: the gradient of the log-softmax and of the fp32 logits.
    loss = n * 2 * FP32 * v
    # Gradients written when the backward reaches the last iteration, and what a layer's
    # backward holds at once: gradients of the MLP's hidden tensors and of the stream.
    early = FP32 * (p.readout + p.core)
    hidden = 2 * placement.compute * model.hidden_size
    layer_backward = n * (hidden + 2 * FP32 * model.d_model)
    recompute = acts.iteration if checkpoint else 0
    held = weights + optimizer + batch

    if placement.strategy == "fsdp":
        gathered = placement.compute * (p.root + 2 * p.block)  # root, one block and its prefetch
        local_grads = FP32 * ceil_div(p.total, shards)
        # Between micro-batches FSDP2 keeps the unsharded gradients, upcast to fp32.
        accumulated = FP32 * p.total if micro_steps > 1 else 0
        root_grads = placement.compute * p.root
        reduce = root_grads + FP32 * p.root  # the root's gradients and their fp32 copy
        at_loss = held + accumulated + gathered + acts.total + loss
        at_core = held + accumulated + gathered + acts.total - acts.readout + root_grads
        at_core += recompute + layer_backward
        at_reduce = held + accumulated + gathered + reduce
        at_step = held + local_grads + FP32 * ceil_div(p.total, shards)
        gradients = max(accumulated + root_grads, local_grads)
        peak = max(at_loss, at_core, at_reduce, at_step)
    else:
        buckets = FP32 * p.total if placement.strategy == "ddp" else 0
        accumulated = FP32 * p.total if micro_steps > 1 else 0
        held += buckets + copies
        at_loss = held + accumulated + acts.total + loss
        at_core = held + max(accumulated, early) + acts.total - acts.readout + recompute
        at_core += layer_backward
        # AdamW on CUDA works on all tensors at once (one fp32 temporary of every moment), on
        # the CPU tensor by tensor (two temporaries of the largest).
        temporary = FP32 * (p.total if placement.device == "cuda" else 2 * p.largest)
        at_step = held - copies + FP32 * p.total + temporary
        gradients = FP32 * p.total + buckets
        peak = max(at_loss, at_core, at_step)
    return TrainingMemory(weights, gradients, optimizer, acts.total + copies, peak)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def deepest_depth(plan: RunPlan) -> int:
    """The deepest depth any step of the run can draw."""
    stages = plan.costed_schedule.stages(plan.total_steps)
    return max(stage.dist.max_depth for stage in stages)
