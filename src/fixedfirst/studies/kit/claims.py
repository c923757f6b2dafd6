"""A comparison a study names before its runs (`Claim`), and the two ways a study decides one: a
primary claim by its own interval, the exploratory rest together, corrected.

A rerun on another machine is a new draw, and among the many same-seed differences a report
computes several lie near the edge of their 95% intervals, so uncorrected verdicts move between
a direction and "cannot tell" from one draw to the next. A study therefore names a few primary
comparisons before its runs, each decided at 95% by its own interval (against zero, or against a
bar: `bar_verdict`); every other difference its analysis computes is exploratory and gets a
two-sided p-value against zero and a verdict corrected over that whole family by Holm's method
(`correct_family`).

Every study declares its claims as the one `Claim`; each reads them from a table of its own
(`ClaimTable`: a preset's [[experiment.primary]], a sweep's [[claims]], serving economics'
[[primary]] and [[comparisons]]), whose keys are the ones its files and results have always had.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal

from fixedfirst.config.schema import coerce, field_docs, require, shown, toml_value
from fixedfirst.errors import UserError
from fixedfirst.stats.evidence import LEVEL, holm, paired, sign, two_sided_p
from fixedfirst.stats.intervals import t_quantile

Side = Literal["above", "at least", "below"]


@dataclass(frozen=True)
class Claim:
    """One comparison named before the runs: a quantity (`of`) of arm a, minus the same of arm b
    seed by seed where there is a b, claimed on one side of a bar and decided by its interval
    over seeds."""

    name: str
    """The claim in a few words, e.g. "Depth decides the answer"."""
    a: str
    """The arm (a sweep's [[runs]] entry) the claim is about."""
    b: str | None = None
    """The arm subtracted, seed by seed; a itself compares two depths of one arm; none: a's own
    quantity against the bar."""
    of: str = ""
    """What is measured: a band of the chains standard set by role, a recall or compute
    quantity, a sweep's metric."""
    a_depth: int | None = None
    """a's serving depth (one of the study's depths)."""
    b_depth: int | None = None
    """b's serving depth."""
    within: str | None = None
    """The study whose arms a and b are, where a report reads several."""
    unit: str | None = None
    """What the quantity is counted in."""
    measure: Literal["difference", "relative"] = "difference"
    """`difference`: a[s] - b[s] for each seed s; `relative`: a[s] / b[s] - 1."""
    side: Side | None = None
    """The side of `bar` claimed: `above` it, `at least` it (the bar itself counts) or `below`
    it; none: either side, decided higher or lower."""
    bar: float | None = None
    """The bar (none: zero, or the claim above zero)."""
    primary: bool = True
    """A primary comparison, decided by its own interval; false: exploratory, corrected over the
    other exploratory ones by Holm's method."""
    caveat: str = ""
    """What the verdict does not say, in a few words, printed beside it."""


CLAIM_FIELDS = {f.name: f for f in fields(Claim)}


@dataclass(frozen=True)
class ClaimTable:
    """How one study's files write its claims: the TOML table, its keys in their order (each the
    claim field it fills), the ones a table must give, the values a key takes where the study
    allows fewer than the field, its defaults, and what a key means in the study's words.
    `read` and `write` keep a study's files and results as they always were; a table reads a
    value as `coerce` does (`typing.Annotated[Claim, TABLE]` on a section's field)."""

    section: str
    doc: str
    """What the table is, in the configuration reference."""
    keys: Mapping[str, str]
    """Key -> the Claim field it fills, in the order the study writes them."""
    required: tuple[str, ...] = ()
    choices: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    """Key -> its value when the table leaves it out, where that is not the field's default."""
    fixed: Mapping[str, Any] = field(default_factory=dict)
    """Field -> the value every claim of this table has (no key for it)."""
    meaning: Mapping[str, str] = field(default_factory=dict)
    """Key -> what it means in the study's words (else the Claim field's docstring)."""

    def key(self, field_name: str) -> str:
        """The key that fills a Claim field."""
        return next(k for k, f in self.keys.items() if f == field_name)

    def read(self, raw: Any) -> Claim:
        """A claim from one table of raw values, every key checked; a mistake is one line that
        names the key."""
        s = self.section
        if not isinstance(raw, dict):
            raise UserError(f"expected a table of key = value lines, got {shown(raw)}")
        for key in raw:
            if key not in self.keys:
                valid = ", ".join(sorted(self.keys))
                raise UserError(f"unknown key {s}.{key}; valid keys in [{s}]: {valid}")
        missing = [key for key in self.required if key not in raw]
        if missing:
            needs = ", ".join(sorted(self.required))
            raise UserError(f"missing key {s}.{missing[0]}; [{s}] needs {needs}")
        hints = typing.get_type_hints(Claim)
        values = dict(self.fixed)
        for key, value in {**self.defaults, **raw}.items():
            value = coerce(value, hints[self.keys[key]], f"{s}.{key}")
            if key in self.choices and value not in self.choices[key]:
                allowed = ", ".join(repr(c) for c in self.choices[key])
                raise UserError(f"{s}.{key}: {shown(value)} is not one of {allowed}")
            values[self.keys[key]] = value
        claim = Claim(**values)
        if "name" in self.keys.values():
            require(
                bool(claim.name.strip()),
                f"{s}.{self.key('name')}",
                "must name the claim in a few words",
            )
        if claim.b is not None and (claim.a, claim.a_depth) == (claim.b, claim.b_depth):
            at = "" if claim.a_depth is None else f" at depth {claim.a_depth}"
            where = "b_depth" if claim.b_depth is not None else "b"
            require(
                False,
                f"{s}.{self.key(where)}",
                f"a and b both name {claim.a!r}{at}; compare two arms or two depths",
            )
        return claim

    def write(self, claim: Claim) -> dict[str, Any]:
        """The claim as its table has it (the keys in their order): what results.json keeps."""
        return {key: getattr(claim, name) for key, name in self.keys.items()}

    def summary(self) -> str:
        """The table in words and the keys it must give, for the configuration reference."""
        return f"{self.doc} Required: {', '.join(f'`{k}`' for k in self.required)}."

    def docs(self) -> list[tuple[str, str, str]]:
        """(key, default, meaning) of every key, for the configuration reference."""
        docs = {name: doc for name, _, doc in field_docs(Claim)}  # type: ignore[arg-type]
        rows = []
        for key, name in self.keys.items():
            default = self.defaults.get(key, CLAIM_FIELDS[name].default)
            if key in self.required or default is MISSING:
                default = None
            meaning = self.meaning.get(key) or docs[name]
            if key in self.choices and key not in self.meaning:
                meaning += " One of " + ", ".join(f"`{c}`" for c in self.choices[key]) + "."
            rows.append((key, "unset" if default is None else toml_value(default), meaning))
        return rows


BarVerdict = Literal["meets the bar", "below the bar", "cannot tell"]


def bar_verdict(low: float, high: float, bar: float) -> BarVerdict:
    """A quantity claimed to be at least `bar`: "meets the bar" when its interval's lower end is
    at or above it, "below the bar" when the upper end is under it, else "cannot tell"."""
    if low >= bar:
        return "meets the bar"
    if high < bar:
        return "below the bar"
    return "cannot tell"


def primary_verdict(low: float, high: float, bar: float | None) -> str:
    """A primary comparison's verdict from its own interval: claimed above zero (`bar` None),
    "higher" when the interval lies above zero, "lower" when below, else "cannot tell";
    claimed at least `bar`, `bar_verdict`."""
    if bar is not None:
        return bar_verdict(low, high, bar)
    if low > 0:
        return "higher"
    if high < 0:
        return "lower"
    return "cannot tell"


def same_seed_difference(a: Mapping[int, float], b: Mapping[int, float]) -> dict[str, Any] | None:
    """a - b paired by seed with its 95% interval and sign; None with fewer than two seeds in
    common (no interval)."""
    if len(set(a) & set(b)) < 2:
        return None
    interval = paired(a, b)
    return {**interval.to_dict(), "sign": sign(interval)}


ZERO_EVERYWHERE = "zero in every seed"
"""The `holm` of a difference that is exactly zero in every seed: no test at all (its p-value is
1 whatever the family), so it is left out of the family rather than raising its size."""


def identically_zero(d: Mapping[str, Any]) -> bool:
    """Whether a same-seed difference is exactly zero in every seed (both arms scored alike)."""
    return d["mean"] == 0.0 and d["sd"] == 0.0


def correct_family(differences: Sequence[dict[str, Any]]) -> None:
    """Give each same-seed difference of the family (an `Interval.to_dict()` with its `sign`) its
    two-sided p-value against zero, `p`, and `holm`: its sign where Holm's method over the family
    rejects zero at 5% family-wise error, otherwise "cannot tell". A difference zero in every
    seed is left out of the family (`ZERO_EVERYWHERE`): it could never be declared, and counting
    it would only make every other difference harder to declare."""
    members = [d for d in differences if not identically_zero(d)]
    for d in differences:
        if identically_zero(d):
            d["p"], d["holm"] = 1.0, ZERO_EVERYWHERE
    p_values = [two_sided_p(d["mean"], d["sd"] / math.sqrt(d["n"]), d["n"] - 1) for d in members]
    for d, p, rejected in zip(members, p_values, holm(p_values), strict=True):
        d["p"] = p
        d["holm"] = d["sign"] if rejected else "cannot tell"


def first_holm_t(size: int, n: int) -> float:
    """The |t| the smallest p-value of a family of `size` must pass on `n` seeds: Holm's first
    threshold, p <= 5% / size, for a two-sided t-test with n - 1 degrees of freedom."""
    return t_quantile(1.0 - (1.0 - LEVEL) / (2 * size), n - 1)


def least_declarable(members: Sequence[Mapping[str, Any]], size: int) -> float | None:
    """The smallest mean difference that the first Holm threshold of a family of `size` could
    have declared among `members` (each with the spread its seeds showed): |mean| must pass
    first_holm_t times its standard error, and the member whose seeds agree most needs the
    least. None when no member has a spread (or there is no family)."""
    needed = [
        first_holm_t(size, d["n"]) * d["sd"] / math.sqrt(d["n"])
        for d in members
        if d["n"] >= 2 and d["sd"] > 0.0
    ]
    return min(needed) if size and needed else None


def family_counts(family: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """An exploratory family (as `correct_family` left it): its size (the differences zero in
    every seed left out, and counted as `zero`), how many of its differences exclude zero before
    and after the correction, the |t| Holm's first threshold needs and the smallest mean
    difference it could have declared with these seeds' spread (`least_declarable`)."""
    members = [d for d in family if d["holm"] != ZERO_EVERYWHERE]
    n = max((d["n"] for d in members), default=0)
    return {
        "size": len(members),
        "seeds": n,
        "zero": len(family) - len(members),
        "uncorrected": sum(d["sign"] != "cannot tell" for d in members),
        "corrected": sum(d["holm"] != "cannot tell" for d in members),
        "t_needed": first_holm_t(len(members), n) if members and n >= 2 else None,
        "least_declarable": least_declarable(members, len(members)),
    }


Values = Callable[[str, str, int], Mapping[int, float]]
"""(arm, quantity, depth) -> the arm's quantity at that serving depth, seed by seed."""


@dataclass(frozen=True)
class ArmComparisons:
    """Every arm against the reference (`versus`: arm -> "QUANTITY@DEPTH" -> difference), the
    primary comparisons with their verdicts, and the exploratory family's counts."""

    versus: dict[str, dict[str, Any]]
    primary: list[dict[str, Any]]
    exploratory: dict[str, Any]


def compare_arms(
    arms: Sequence[str],
    reference: str,
    cells: Sequence[tuple[str, int]],
    values: Values,
    primary: Sequence[Claim],
    table: ClaimTable,
) -> ArmComparisons:
    """Each arm minus `reference` at every (quantity, depth) of `cells`, same seed by same seed:
    the exploratory family, Holm-corrected, leaving out the cells a primary claim names; and
    each primary claim decided by its own interval (written by `table`)."""
    versus: dict[str, dict[str, Any]] = {}
    family: list[dict[str, Any]] = []
    named = {(p.a, p.a_depth, p.b, p.b_depth, p.of) for p in primary}
    for arm in arms:
        if arm == reference or reference not in arms:
            continue
        versus[arm] = {}
        for of, depth in cells:
            d = same_seed_difference(values(arm, of, depth), values(reference, of, depth))
            versus[arm][f"{of}@{depth}"] = d
            if d is not None and (arm, depth, reference, depth, of) not in named:
                family.append(d)
    correct_family(family)
    primaries = []
    for p in primary:
        assert p.b is not None and p.a_depth is not None and p.b_depth is not None
        d = same_seed_difference(values(p.a, p.of, p.a_depth), values(p.b, p.of, p.b_depth))
        verdict = None if d is None else primary_verdict(d["low"], d["high"], p.bar)
        primaries.append({**table.write(p), "difference": d, "verdict": verdict})
    return ArmComparisons(versus, primaries, family_counts(family))
