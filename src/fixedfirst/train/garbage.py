"""Python's garbage collector during training: out of the steps, run at the boundaries.

The cyclic collector runs whenever enough objects were allocated since its last run, in the
middle of whatever runs then, and a collection of the oldest generation walks every object the
process holds (the model's modules, the data's indices, the compiler's graphs). On a GPU that
is time the host launches nothing while the device empties; under several processes, one rank
collecting stalls every rank at the next collective. So, as torchtitan and nanochat do, the
collector is off while the loop runs: what exists before step 0 is frozen out of its reach
(`gc.freeze`), the young generations are collected at each log line and everything at each
checkpoint, where the steps' rhythm is broken anyway, and afterwards it is as it was (a study
trains many runs in one process). A step itself makes no reference cycles: its tensors and
autograd graph are freed by reference counts.
"""

from __future__ import annotations

import gc
from types import TracebackType


class CollectAtBoundaries:
    """`with CollectAtBoundaries() as collector:` around the loop; `collector.at_boundary`
    after each log line."""

    def __enter__(self) -> CollectAtBoundaries:
        self.was_enabled = gc.isenabled()
        gc.collect()
        gc.freeze()
        gc.disable()
        return self

    def at_boundary(self, checkpoint: bool) -> None:
        """Collect the young generations, or every generation at a `checkpoint`."""
        gc.collect(2 if checkpoint else 1)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        gc.unfreeze()
        if self.was_enabled:
            gc.enable()
