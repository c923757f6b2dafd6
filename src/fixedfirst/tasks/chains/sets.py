"""The named evaluation sets of the chains experiment: the standard set, and harder or shifted ones.

Every set holds sequences of the training length with one long chain each (`program.py`). The
standard set's long chain has the task's eval_ops operations drawn like training's. The others
change one thing, to see whether what a schedule learned is the task or a shortcut of its training
distribution:

- `neg-0.1`, `neg-0.9`: every chain of the sequence (the long one included) draws `neg` with that
  probability instead of the task's (training's 0.5);
- `plus-only`, `neg-only`, `alternating`, `plus-plus-neg-neg`: the long chain's operations follow
  a fixed pattern (the label after d `+1`s is start + d, after d `neg`s it is the start or its
  negation by the parity of d: shortcuts a model may or may not find);
- `longest`: the long chain has as many operations as the sequence can hold (statements - 1), so
  difficulties past eval_ops are tested too.

Each set is scored at every serving depth, per difficulty; bands follow `bands.py` for the set's
own number of operations.
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
