"""What fixedfirst's trainer and evaluation need of a looped language model, ours or another's.

The trainer calls `forward(tokens, depth)` for the logits of one optimizer step's micro-batch at
the schedule's depth, evaluation `nll_by_depth` for held-out NLL at many depths, and both read
two declarations: whether a step may leave parameters without a gradient (DistributedDataParallel
must then look for them) and why the model is never compiled, if it is not. `LoopedTransformer`
is ours; `model/transformers_loop.py` wraps a transformers looped architecture in the same
shape, so neither the trainer nor evaluation knows which they run (docs/guides/any-loop.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import torch
from torch import nn


class LoopedLM(nn.Module):
    """A language model whose depth (loop passes) is an argument of every forward."""

    leaves_parameters_unused: bool = False
    """True when a step may give some parameters no gradient (Inkling2Loop's message gates at one
    pass): DDP then finds them each step (`find_unused_parameters`)."""
    gathers_in_bf16: bool = True
    """Whether FSDP2 may gather the weights in bf16 for a bf16 run (False: some modules must
    compute in float32, so the weights are gathered in float32 and autocast computes in bf16)."""
    never_compiled: str | None = None
    """Why `train.compile` never compiles this model (None: `compile_loop` compiles it)."""
    vocab_size: int
    """Token ids are below it (the warm-up step before step 0 draws random ones)."""

    def forward(
        self,
        tokens: torch.Tensor,
        depth: int,
        grad_depth: int | None = None,
        state_seeds: Sequence[int] | None = None,
        checkpoint: bool = False,
    ) -> torch.Tensor:
        """Logits (B, T, vocab) of `tokens` (B, T) after `depth` loop passes. Truncated backprop
        and per-row initial states are features of our own model (a run of another refuses the
        first before it starts, and has no random state for the second); `checkpoint` is
        activation checkpointing, each model's own."""
        raise NotImplementedError

    def nll_by_depth(
        self, tokens: torch.Tensor, targets: torch.Tensor, depths: Iterable[int]
    ) -> dict[int, float]:
        """Mean next-token NLL (nats) at each depth (targets of IGNORE_INDEX not scored)."""
        raise NotImplementedError

    def row_nll_by_depth(
        self, tokens: torch.Tensor, targets: torch.Tensor, depths: Iterable[int]
    ) -> tuple[dict[int, float], dict[int, torch.Tensor]]:
        """`nll_by_depth`'s means, and each row's summed NLL (B,) at each depth."""
        raise NotImplementedError

    def logits_by_depth(
        self, tokens: torch.Tensor, depths: Iterable[int]
    ) -> Iterator[tuple[int, torch.Tensor]]:
        """(depth, logits) for every requested depth, ascending (task metrics by depth)."""
        raise NotImplementedError

    def once_per_forward(self) -> list[nn.Module]:
        """The blocks a forward runs once (FSDP2 makes each a unit of its own, gathered just
        before it runs); what runs at every loop pass stays with the root unit."""
        raise NotImplementedError

    def compile_loop(self) -> None:
        """Compile what a training forward runs, in place (see `never_compiled`)."""
        raise NotImplementedError
