"""The named evaluation sets of the chains experiment: the standard set, and harder or shifted ones.

Each set changes one thing about the long chain of the standard set (how often `neg` is drawn, a
fixed pattern of operations, a chain that fills the sequence), to see whether what a schedule
learned is the task or a shortcut of its training distribution (docs/design.md §5). Each is
scored at every serving depth, per difficulty, in bands of its own number of operations.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from fixedfirst.tasks.chains.program import NEG, PLUS_ONE, ChainsOptions


@dataclass(frozen=True)
class EvaluationSpec:
    """How a named set differs from the task's own evaluation sequences."""

    name: str
    neg_probability: float | None = None
    """Probability of `neg` for every chain of the sequence; None: the task's."""
    pattern: tuple[str, ...] = ()
    """The long chain's operations, repeated; empty: drawn like every other chain's."""
    longest: bool = False
    """The long chain fills the sequence (statements - 1 operations)."""

    def options(self, task: ChainsOptions) -> ChainsOptions:
        """The task's options as this set changes them (only what a set may change)."""
        changes: dict[str, Any] = {}
        if self.neg_probability is not None:
            changes["neg_probability"] = self.neg_probability
        if self.longest:
            changes["eval_ops"] = task.statements - 1
        return dataclasses.replace(task, **changes)


STANDARD = "standard"
SETS: dict[str, EvaluationSpec] = {
    spec.name: spec
    for spec in (
        EvaluationSpec(STANDARD),
        EvaluationSpec("neg-0.1", neg_probability=0.1),
        EvaluationSpec("neg-0.9", neg_probability=0.9),
        EvaluationSpec("plus-only", pattern=(PLUS_ONE,)),
        EvaluationSpec("neg-only", pattern=(NEG,)),
        EvaluationSpec("alternating", pattern=(PLUS_ONE, NEG)),
        EvaluationSpec("plus-plus-neg-neg", pattern=(PLUS_ONE, PLUS_ONE, NEG, NEG)),
        EvaluationSpec("longest", longest=True),
    )
}
"""Every named set, the standard one first."""
