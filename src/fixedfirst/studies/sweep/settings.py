"""The `[sweep]` table of a sweep file: how its runs are repeated, scored and reported.

A dataclass like every section of a run configuration: its attribute docstrings are the
configuration reference (`fixedfirst config-reference`), `config.schema.build_section` checks the
keys and types, and `__post_init__` what is impossible on its own. What depends on the runs (a
reference that trains uniform 1..16, a Figure 3 run with a switch) is checked by `spec.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from fixedfirst.config.limits import MAX_DEPTH
from fixedfirst.config.schema import require
from fixedfirst.evaluation.cached import HeldOut
from fixedfirst.evaluation.nll import EVAL_DEPTHS, SERVING_RANGE
from fixedfirst.studies.kit.settings import check_seeds

HeldOutRows = Literal["auto", "first", "per-seed", "shared"]


@dataclass
class SweepSettings:
    """How a sweep's runs are repeated over seeds, scored and reported."""

    SECTION: ClassVar[str] = "sweep"

    seeds: list[int] | None = None
    """Train every [[runs]] entry once per seed, as NAME-seedS with train.seed = S (an entry's
    own `seeds`, a subset, trains only those); the report then gives each entry's mean and
    interval over its seeds, and [[claims]] can be decided."""
    reference: str | None = None
    """The [[runs]] entry (uniform 1..16, on the token budget) that modeled savings and NLL
    differences are measured against."""
    figure3: str | None = None
    """The fixed-first entry whose training loss around the switch is drawn as Figure 3 (default:
    the first fixed-first entry)."""
    metric: Literal["nll", "task"] = "nll"
    """`nll`: mean serving NLL; `task`: the data kind's own metric (e.g. chains accuracy), also
    measured at every serving depth."""
    switch_study: bool = False
    """Add the auto-switch study's table and figure (fixed switch fractions against auto rules)."""
    eval_batches: int | None = None
    """Validation batches (of each run's micro-batch size) of the final evaluation; default each
    run's eval.batches. Unused with `heldout_rows`."""
    heldout: HeldOutRows = "auto"
    """Which held-out rows the final evaluation scores. `first`: the split's first rows.
    `per-seed`: rows drawn by each run's seed (every entry of one seed scores the same rows, and
    the interval over seeds covers the held-out sampling). `shared`: one set of `heldout_rows`
    rows drawn once by `heldout_seed` for every run, and intervals that cover both the seeds and
    the held-out sample (its `heldout_blocks`). `auto`: `per-seed` with seeds, else `first`."""
    heldout_rows: int | None = None
    """Rows the final evaluation scores, whatever each run's batch size (required by `shared`);
    default eval batches of each run's micro-batch size."""
    heldout_seed: int = 0
    """`shared`: the seed that draws the one held-out set."""
    heldout_blocks: int = 32
    """`shared`: the held-out rows are split into this many equal blocks, the units over which an
    interval covers the held-out sample."""
    eval_precision: Literal["fp32", "run"] = "fp32"
    """The final evaluation's precision: fp32 whatever the training precision, or `run`: each
    run's own (bf16 autocast where it trained so)."""
    eval_depths: list[int] = field(default_factory=lambda: list(EVAL_DEPTHS))
    """Serving depths of the final evaluation: 1..16 (the mean serving NLL's) and any beyond;
    the deepest sets its cost (one pass of the recurrence to it per row)."""

    def __post_init__(self) -> None:
        s = self.SECTION
        if self.seeds is not None:
            check_seeds(self.seeds, f"{s}.seeds")
        if self.eval_batches is not None:
            require(self.eval_batches >= 1, f"{s}.eval_batches", "must be >= 1")
        if self.heldout_rows is not None:
            require(self.heldout_rows >= 1, f"{s}.heldout_rows", "must be >= 1")
        require(self.heldout_seed >= 0, f"{s}.heldout_seed", "must be >= 0")
        require(
            set(SERVING_RANGE) <= set(self.eval_depths)
            and len(set(self.eval_depths)) == len(self.eval_depths)
            and max(self.eval_depths) <= MAX_DEPTH,
            f"{s}.eval_depths",
            f"distinct depths up to {MAX_DEPTH} that include 1..16 (the mean serving NLL's), "
            f"got {self.eval_depths}",
        )
        require(self.heldout_blocks >= 1, f"{s}.heldout_blocks", "must be >= 1")
        if self.heldout == "shared":
            require(
                self.heldout_rows is not None,
                f"{s}.heldout_rows",
                'heldout = "shared" scores the same rows in every run: set their number, e.g. '
                "heldout_rows = 2048",
            )
            rows = self.heldout_rows or 0
            require(
                rows % self.heldout_blocks == 0 and rows >= 2 * self.heldout_blocks,
                f"{s}.heldout_blocks",
                f"{self.heldout_blocks} blocks must split heldout_rows = {rows} into equal "
                "blocks of at least 2 rows",
            )

    @property
    def rows(self) -> Literal["first", "per-seed", "shared"]:
        """`heldout` with `auto` resolved."""
        if self.heldout == "auto":
            return "per-seed" if self.seeds is not None else "first"
        return self.heldout

    @property
    def blocks(self) -> int | None:
        """Blocks of the shared held-out set (None: the rows are not shared)."""
        return self.heldout_blocks if self.rows == "shared" else None

    def held_out(self, run_seed: int) -> HeldOut:
        """The rows the final evaluation of a run of `run_seed` scores."""
        seed = {"first": None, "per-seed": run_seed, "shared": self.heldout_seed}[self.rows]
        return HeldOut(
            batches=self.eval_batches,
            rows=self.heldout_rows,
            seed=seed,
            precision=self.eval_precision,
        )
