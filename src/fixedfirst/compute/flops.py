"""The compute model: modeled FLOPs of a looped transformer and of a depth schedule.

Forward FLOPs per token at depth K are F(K) = P + K * C + R (prelude, one core iteration,
readout), counting 2 FLOPs per matmul weight per token and 4 T d per attention layer application
(no causal halving, as torch's FlopCounterMode counts, so the model can be checked against it).
Training is 3 * F(K), less the forward-only iterations of truncated backprop and the state
gradient the first iteration with gradients skips; activation checkpointing's recomputation is
not counted (MFU's convention). A schedule is costed from its depth histogram
(`schedules.DepthHistogram`): the expectation is exact, and a run's realised cost sums the depths
it draws, known before it starts. The derivation, the calibration against the paper
and the measurements are in docs/design.md §3.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from fixedfirst.config import ModelConfig
from fixedfirst.schedules import DepthHistogram


class CostModel(Protocol):
    """What planning needs of a compute model: training FLOPs per token of one optimizer step at
    a depth. `FlopModel` is ours, derived from the shape; `compute/measured.py` measures one of
    a model we did not write."""

    def train(self, depth: int, grad_depth: int | None = None) -> float: ...


class RunCost(CostModel, Protocol):
    """What fixedfirst's commands need of the compute model of a run's model, ours or measured:
    also a forward, scoring at several depths (an auto switch's probes) and the ratio of the
    work outside the loop to one pass of it."""

    def forward(self, depth: int) -> float: ...

    def eval_all_depths(self, depths: list[int]) -> float: ...

    @property
    def non_recurrent_ratio(self) -> float: ...


@dataclass(frozen=True)
class FlopModel:
    """Forward FLOPs per token of each piece of the model at one sequence length."""

    prelude: float
    iteration: float
    readout: float
    first_state_grad: float = 0.0
    """The backward FLOPs of the gradient with respect to the incoming state of one iteration's
    matmuls: the first iteration with gradients does not compute it (its state needs none)."""

    def forward(self, depth: int) -> float:
        return self.prelude + depth * self.iteration + self.readout

    def train(self, depth: int, grad_depth: int | None = None) -> float:
        free = 0 if grad_depth is None else max(0, depth - grad_depth)
        return 3 * self.forward(depth) - 2 * free * self.iteration - self.first_state_grad

    def recomputed(self, depth: int, grad_depth: int | None = None) -> float:
        """What activation checkpointing adds per token: one more forward of every iteration
        with gradients."""
        graded = depth if grad_depth is None else min(depth, grad_depth)
        return graded * self.iteration

    def eval_all_depths(self, depths: list[int]) -> float:
        """One pass of the recurrence to max(depths) with a readout at every requested depth."""
        return self.prelude + max(depths) * self.iteration + len(set(depths)) * self.readout

    @property
    def non_recurrent_ratio(self) -> float:
        """(prelude + readout) / one core iteration: the a/b of docs/design.md §3."""
        return (self.prelude + self.readout) / self.iteration


def layer_matmul_params(config: ModelConfig) -> int:
    d, h = config.d_model, config.hidden_size
    mlp = (3 if config.mlp == "swiglu" else 2) * d * h
    return 4 * d * d + mlp


def flop_model(config: ModelConfig, seq_len: int) -> FlopModel:
    """Per-token forward FLOPs of prelude, one core iteration and readout at sequence length T."""
    d = config.d_model
    layer = 2 * layer_matmul_params(config) + 4 * seq_len * d
    # The concat adapter's halves: W_e e once per forward, W_s s once per iteration.
    adapter_half = 2 * d * d if config.injection == "concat" else 0
    return FlopModel(
        prelude=config.n_prelude * layer + adapter_half,
        iteration=adapter_half + config.n_core * layer,
        readout=config.n_coda * layer + 2 * d * config.vocab_size,
        first_state_grad=adapter_half,
    )


def train_flops(
    cost: CostModel, histogram: DepthHistogram, tokens_per_step: int, grad_depth: int | None = None
) -> float:
    """Modeled training FLOPs of the steps `histogram` counts: of the depths a run draws (what the
    trainer's FLOP counter will read at the end, known before the first step), or of the
    schedule as a distribution (what modeled savings compare)."""
    return tokens_per_step * histogram.total(lambda k: cost.train(k, grad_depth))
