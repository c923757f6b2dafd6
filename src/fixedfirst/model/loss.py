"""The one loss: mean next-token cross-entropy over the scored positions.

Targets equal to IGNORE_INDEX are not scored (padding, a task's prompt tokens): the convention of
`torch.nn.functional.cross_entropy`, used by every batch source, the trainer, the diagnostic and
evaluation alike. Logits are upcast to float32 so that the loss under bf16 autocast is computed as
precisely as in fp32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100
"""A target that is not scored."""


def next_token_loss(
    logits: torch.Tensor, targets: torch.Tensor, reduction: str = "mean"
) -> torch.Tensor:
    """Cross-entropy of (B, T, V) logits against (B, T) targets, IGNORE_INDEX skipped."""
    return F.cross_entropy(
        logits.float().flatten(0, 1),
        targets.flatten(),
        ignore_index=IGNORE_INDEX,
        reduction=reduction,
    )
