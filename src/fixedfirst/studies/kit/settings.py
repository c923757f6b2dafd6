"""The [experiment] section every preset study shares, and the one check of a study's seeds.

A preset study's own settings (bios, chains, the looped mixture-of-experts, finishing) hold its
FLOP budget, its seeds, the serving depths it measures and its primary claims, and some the
depths it compares at and its evaluation sequences. Each study declares these keys in its own
dataclass (their defaults and words are its own) and subclasses `StudySettings`, which checks
them once, in one way, with one message each; a study checks its own keys in `check`, before
the primaries are read against them.
"""

from __future__ import annotations

import typing
from dataclasses import asdict
from typing import Any, ClassVar

from fixedfirst.config.limits import MAX_DEPTH
from fixedfirst.errors import UserError
from fixedfirst.studies.kit.claims import Claim, ClaimTable


def distinct_seeds(seeds: list[int], least: int = 1) -> bool:
    """Whether `seeds` are distinct integers >= 0, at least `least` of them."""
    return len(seeds) >= least and len(set(seeds)) == len(seeds) and min(seeds, default=0) >= 0


def check_seeds(seeds: list[int], key: str, least: int = 1) -> None:
    """Refuse seeds that are not distinct integers >= 0, or fewer than `least` of them (two
    where a study's verdicts are intervals over seeds)."""
    if distinct_seeds(seeds, least):
        return
    if least > 1:
        raise UserError(
            f"{key}: at least two distinct seeds >= 0 (the intervals are over seeds), got {seeds}"
        )
    raise UserError(f"{key}: distinct seeds >= 0, at least one, got {seeds}")


class StudySettings:
    """The keys every preset study's [experiment] has, in the words of the configuration
    reference: `flops`, `seeds`, `depths` and `primary` (its dataclass declares them again with
    its defaults, and its own words where it has more to say), and where it has them
    `compare_depths` and the evaluation sequences (`SEQUENCES`)."""

    SECTION: ClassVar[str] = "experiment"
    LEAST_SEEDS: ClassVar[int] = 1
    """Two for a study whose every verdict is an interval over seeds."""
    DEEPEST: ClassVar[int] = MAX_DEPTH
    SEQUENCES: ClassVar[tuple[str, ...]] = ()
    """Its keys that count evaluation sequences."""

    flops: float
    """Modeled training-FLOP budget of every run (compute-matched)."""
    seeds: list[int]
    """Training seeds (initialisation, data order, the draw of evaluation sequences); every arm
    runs with each."""
    depths: list[int]
    """Serving depths at which every run is measured."""
    primary: list[Claim]
    """The primary comparisons, `[[experiment.primary]]` tables named before the runs, each
    decided by its own 95% interval over seeds; every other difference the report computes is
    exploratory, its verdict corrected over all of them by Holm's method."""

    def arms(self) -> tuple[list[str], str]:
        """The arms a primary claim may name, and the keys they come from."""
        schedules: list[str] = getattr(self, "schedules")  # noqa: B009 (each study's own key)
        return schedules, f"{self.SECTION}.schedules"

    def check(self) -> None:
        """The study's own keys (a subclass's), checked before the primaries."""

    def check_claim(self, claim: Claim, table: ClaimTable) -> None:
        """One primary against the study: arms it trains, depths it measures, and a difference of
        accuracies within (-1, 1]."""
        arms, listed = self.arms()
        s, drop = table.section, f"(--set {self.SECTION}.primary=[] drops them all)"
        for name in ("a", "b"):
            value = getattr(claim, name)
            if value is not None and value not in arms:
                raise UserError(
                    f"{s}.{table.key(name)}: {value!r} ({claim.name}) is not one of the arms "
                    f"{arms} (from {listed}); add it, or drop the comparison {drop}"
                )
        for name in ("a_depth", "b_depth"):
            value = getattr(claim, name)
            if value is not None and value not in self.depths:
                raise UserError(
                    f"{s}.{table.key(name)}: {value} ({claim.name}) is not one of "
                    f"{self.SECTION}.depths {self.depths}; add it, or drop the comparison {drop}"
                )
        if claim.b is not None and claim.bar is not None and not -1 < claim.bar <= 1:
            raise UserError(f"{s}.bar: an accuracy difference is in (-1, 1]; got {claim.bar}")

    def __post_init__(self) -> None:
        s = self.SECTION
        if self.flops <= 0:
            raise UserError(f"{s}.flops: the FLOP budget must be > 0, got {self.flops}")
        check_seeds(self.seeds, f"{s}.seeds", self.LEAST_SEEDS)
        if not self.depths or min(self.depths) < 1 or max(self.depths) > self.DEEPEST:
            raise UserError(f"{s}.depths: depths must be in 1..{self.DEEPEST}, got {self.depths}")
        compared: list[int] | None = getattr(self, "compare_depths", None)
        if compared is not None:
            missing = [d for d in compared if d not in self.depths]
            if not compared or missing:
                raise UserError(
                    f"{s}.compare_depths: {missing or 'none'} not among {s}.depths "
                    f"{self.depths}; compare at depths that are measured"
                )
        for key in self.SEQUENCES:
            if not 2 <= getattr(self, key) <= 100_000:
                raise UserError(f"{s}.{key}: must be in 2..100000, got {getattr(self, key)}")
        self.check()
        names = [p.name for p in self.primary]
        if len(set(names)) != len(names):
            raise UserError(f"{s}.primary: every claim needs its own name, got {names}")
        table = self.claims()
        for i, p in enumerate(self.primary):
            try:
                self.check_claim(p, table)
            except UserError as e:
                raise UserError(f"{s}.primary[{i}]: {e}") from None

    @classmethod
    def claims(cls) -> ClaimTable:
        """The table the study's primaries are read with (their field's annotation)."""
        hint = typing.get_type_hints(cls, include_extras=True)["primary"]
        (annotated,) = typing.get_args(hint)
        return typing.get_args(annotated)[1]

    def to_dict(self) -> dict[str, Any]:
        """The settings as results.json keeps them: every key, the primaries as their table
        writes them."""
        table = self.claims()
        return {**asdict(self), "primary": [table.write(p) for p in self.primary]}  # type: ignore[call-overload]
