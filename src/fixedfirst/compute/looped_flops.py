"""The FLOPs of a transformers looped architecture counted from its shape, no weights built.

compute/measured.py counts torch's FLOPs on the model itself, which a planning machine cannot
build at 26B parameters; this count reads the shape the memory model reads
(compute/looped_memory.py): 2 FLOPs per active weight per application forward (a token's experts
only), eager attention's two T x T products, the head. At two small sizes it is 14-18% below
torch's count with eager experts, 27-36% for low-rank, whose adapters' own work it leaves out
(tests/test_looped_memory.py). `fixedfirst plan` prices a finish (`--model-config`) and a run of
such an architecture with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from fixedfirst.compute.looped_memory import LoopedShape


def flops_per_token(
    shape: LoopedShape, seq_len: int, depth: int, lowrank: bool, checkpoint: bool
) -> float:
    """Training FLOPs per token at `depth`: 2 per active weight per application forward (a
    token's experts only), eager attention's two T x T products, the head; the backward twice
    the forward for full fine-tuning, once for low-rank (no gradients of frozen weights; the
    adapters' own work left out); checkpointing one more forward of the layers."""
    forward = 2.0 * shape.vocab * shape.hidden  # the head
    layers = 0.0
    for layer in shape.layers:
        active = layer.parameters - layer.expert_parameters * (1 - shape.top_k / shape.experts)
        per = 2 * active + 4 * layer.heads * layer.head_dim * seq_len
        layers += per * (depth if layer.looped else 1)
    forward += layers
    backward = (1 if lowrank else 2) * forward
    return forward + backward + (layers if checkpoint else 0.0)


@dataclass(frozen=True)
class ShapeFlops:
    """The compute model of a transformers looped architecture counted from its shape
    (`flops_per_token`), no weights built: what plans a run of it at a size no planning machine
    can build (compute/measured.py counts torch's FLOPs on the model itself)."""

    shape: LoopedShape
    seq_len: int
    lowrank: bool

    def train(self, depth: int, grad_depth: int | None = None) -> float:
        return flops_per_token(self.shape, self.seq_len, depth, self.lowrank, False)

    def recomputed(self, depth: int, grad_depth: int | None = None) -> float:
        """What activation checkpointing adds per token: every layer application's forward."""
        checkpointed = flops_per_token(self.shape, self.seq_len, depth, self.lowrank, True)
        return checkpointed - self.train(depth)
