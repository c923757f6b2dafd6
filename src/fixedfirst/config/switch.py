"""`[switch]`: how a fixed-first run with `schedule.switch = "auto"` decides when to switch.

The paper fixes the switch fraction in advance (67% or 80% of the tokens) and names an adaptive
switch as future work. Here the run watches one noisy series and switches once its trend has
flattened (docs/design.md §14): the training loss (`plateau`), or the gain in held-out NLL from
serving deeper than K0 (`depth-gap`). A floor and a ceiling bound the switch fraction, so the
finishing stage always gets at least (1 - ceiling) of the steps. This section is read only when
the schedule's switch is `auto`; otherwise it defines nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from fixedfirst.config.limits import MAX_BATCH, MAX_DEPTH
from fixedfirst.config.schema import check_fields, require

DEFAULT_THRESHOLDS = {"plateau": 0.3, "depth-gap": 0.01}
"""Nats per unit fraction of the run (docs/design.md §14 says how they were chosen)."""


@dataclass
class SwitchConfig:
    """When `schedule.switch = "auto"` switches (docs/design.md §14)."""

    SECTION: ClassVar[str] = "switch"

    rule: Literal["plateau", "depth-gap"] = "plateau"
    """`plateau`: switch when the training loss stops falling: the fall of a straight line through
    the logged losses of the trailing `window`, in nats per unit fraction of the run, drops to
    `threshold`. `depth-gap`: every `every` steps, measure held-out NLL at K0 and at `depth` in one
    pass of the recurrence; switch when the gain from depth, NLL(K0) - NLL(depth), stops shrinking
    faster than `threshold` (the fixed stage has stopped specialising the model to K0)."""
    floor: float = 0.5
    """Earliest switch, as a fraction of the run's steps (checks start there)."""
    ceiling: float = 0.9
    """Latest switch, as a fraction of the run's steps: a run whose rule has not fired switches
    here, so the finishing stage gets at least (1 - ceiling) of the steps."""
    every: int = 10
    """Steps between two checks of the rule (and, for `depth-gap`, between two probes)."""
    window: float = 0.2
    """The trailing window the trend is fitted over, as a fraction of the run's steps."""
    threshold: float | None = None
    """The rule fires when the decrease of its series per unit fraction of the run, plus `z`
    standard errors, is at most this (nats). Default: 0.3 for `plateau`, 0.01 for `depth-gap`."""
    z: float = 1.0
    """Standard errors of the fitted slope added to the decrease before it is compared with
    `threshold`: the rule fires only when even a pessimistic reading of the noise says the series
    has flattened (0: the point estimate)."""
    depth: int | None = None
    """`depth-gap`: the deeper serving depth compared with K0. Default: schedule.k_max."""
    batches: int = 2
    """`depth-gap`: validation batches per probe (the first ones of the validation set)."""

    def __post_init__(self) -> None:
        check_fields(self)
        s = self.SECTION
        require(0.0 < self.ceiling < 1.0, f"{s}.ceiling", f"must be in (0, 1), got {self.ceiling}")
        require(0.0 <= self.floor <= 1.0, f"{s}.floor", f"must be in [0, 1], got {self.floor}")
        require(
            self.floor <= self.ceiling,
            f"{s}.floor",
            f"{self.floor} is above ceiling = {self.ceiling}; the switch must fit between them",
        )
        require(self.every >= 1, f"{s}.every", f"must be >= 1, got {self.every}")
        require(0.0 < self.window <= 1.0, f"{s}.window", f"must be in (0, 1], got {self.window}")
        if self.threshold is not None:
            require(
                self.threshold >= 0,
                f"{s}.threshold",
                f"must be >= 0 (a decrease per fraction of the run), got {self.threshold}",
            )
        require(0.0 <= self.z <= 10.0, f"{s}.z", f"must be in [0, 10], got {self.z}")
        if self.depth is not None:
            require(1 <= self.depth <= MAX_DEPTH, f"{s}.depth", f"must be in 1..{MAX_DEPTH}")
        require(1 <= self.batches <= MAX_BATCH, f"{s}.batches", f"must be >= 1, got {self.batches}")

    @property
    def rule_threshold(self) -> float:
        """The threshold in use (explicit, or the rule's default)."""
        return self.threshold if self.threshold is not None else DEFAULT_THRESHOLDS[self.rule]

    def probe_depth(self, k_max: int) -> int:
        """The deeper depth `depth-gap` compares K0 with."""
        return self.depth if self.depth is not None else k_max
