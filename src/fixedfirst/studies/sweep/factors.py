"""A factor study: a sweep's gaps measured again while one factor of its regime changes.

    [[gaps]]                          # a's mean serving NLL / b's - 1, paired by seed
    name = "K0=2, switch 0.67"
    a = "ff-k2-s0.67"                 # [[runs]] entries
    b = "uniform"
    primary = true                    # named before the runs, decided at 95%
    at_levels = true                  # false: measured at the base only

    [[factors]]
    name = "lr"                       # short: it prefixes the level's run names
    title = "learning-rate schedule"
    base = "cosine"                   # what the base configuration has
    seeds = [0, 1, 2]                 # the levels' seeds (default: each entry's own)
    [[factors.levels]]
    name = "wsd"                      # its runs: wsd-ENTRY(-seedS)
    train.lr_schedule = "wsd"         # `section.key = value` on top of each entry

Every entry a gap at the levels needs (its a and b, and the runs they are compute-matched to)
is trained again at every level of every factor, the level's keys applied after the entry's own;
a `flops_of` names the same level's run. The report's factor table gives each gap at the base
and at every level, and each level's change of the gap, paired by seed (and, with a shared
held-out set, by its blocks: `evidence.paired_matrix`). The changes are exploratory: their
verdicts are corrected for the whole family by Holm's method, while a primary gap is decided at
95%.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from fixedfirst.config import build_section, merge_tables, require
from fixedfirst.errors import UserError
from fixedfirst.stats.evidence import LEVEL, holm, paired_matrix, two_sided_p
from fixedfirst.stats.intervals import crossed_interval


@dataclass(frozen=True)
class GapSpec:
    """A `[[gaps]]` table: a relative gap of mean serving NLL between two [[runs]] entries."""

    SECTION: ClassVar[str] = "gaps"

    name: str
    """The gap's label in the factor table, e.g. "K0=2, switch 0.67 vs uniform"."""
    a: str
    """The [[runs]] entry whose NLL is compared (the gap is a / b - 1, seed by seed)."""
    b: str
    """The [[runs]] entry it is compared with."""
    primary: bool = True
    """A primary comparison, named before the runs and decided at 95%; `false`: exploratory."""
    at_levels: bool = True
    """Measured again at every factor level; `false`: at the base only, so its entries are not
    trained again at the levels (unless another gap needs them) and it has no changes."""

    def __post_init__(self) -> None:
        require(self.a != self.b, "gaps.b", f"a and b both name {self.a!r}; compare two entries")


@dataclass(frozen=True)
class FactorSpec:
    """A `[[factors]]` table: one factor of the regime and the levels it is changed to, each a
    `[[factors.levels]]` table with a `name` and `section.key = value` lines."""

    SECTION: ClassVar[str] = "factors"

    name: str
    """Short name of the factor."""
    title: str
    """The factor in words, for the report."""
    base: str
    """The level the base configuration has (its runs are the entries themselves)."""
    seeds: list[int] | None = None
    """The seeds every level trains (a subset of [sweep] seeds, e.g. fewer than the base's);
    default each entry's own. A level's change is paired over the seeds it shares with the base."""
    levels: list[dict[str, Any]] = field(default_factory=list, metadata={"table": True})

    @property
    def level_names(self) -> list[str]:
        return [level["name"] for level in self.levels]


def load_factors(
    raw: dict[str, Any], entries: list[dict[str, Any]], path: Path
) -> tuple[list[GapSpec], list[FactorSpec], list[dict[str, Any]]]:
    """The file's [[gaps]] and [[factors]], and its [[runs]] entries with every level's copies of
    the entries the gaps need appended (as `load_sweep` then reads them)."""
    names = [e.get("name") for e in entries]
    gaps = [_gap(g, names, f"{path}: gaps[{i}]") for i, g in enumerate(_tables(raw, "gaps", path))]
    factors = [
        _factor(f, f"{path}: factors[{i}]") for i, f in enumerate(_tables(raw, "factors", path))
    ]
    if factors and not gaps:
        raise UserError(f"{path}: [[factors]] change the regime of [[gaps]]; add at least one")
    levels = [level for f in factors for level in f.level_names]
    if len(set(levels)) != len(levels) or set(levels) & {f.base for f in factors}:
        raise UserError(f"{path}: factor levels must have distinct names, got {levels}")
    needed = _needed(gaps, entries)
    expanded = list(entries)
    for factor in factors:
        for level in factor.levels:
            keys = {k: v for k, v in level.items() if k != "name"}
            for entry in (e for e in entries if e.get("name") in needed):
                copy = dict(entry)
                copy["name"] = f"{level['name']}-{entry['name']}"
                if factor.seeds is not None:
                    copy["seeds"] = factor.seeds
                if "flops_of" in copy:
                    copy["flops_of"] = f"{level['name']}-{copy['flops_of']}"
                for section, values in keys.items():
                    if not isinstance(values, dict):
                        raise UserError(
                            f"{path}: level {level['name']!r}: {section} = {values!r} is not a "
                            "`section.key = value` line"
                        )
                    copy[section] = merge_tables(copy.get(section, {}), values)
                expanded.append(copy)
    return gaps, factors, expanded


def _tables(raw: dict[str, Any], key: str, path: Path) -> list[dict[str, Any]]:
    tables = raw.get(key, [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise UserError(f"{path}: {key} must be [[{key}]] tables of key = value lines")
    return tables


def _gap(raw: dict[str, Any], names: list[Any], where: str) -> GapSpec:
    try:
        gap = build_section(GapSpec, raw)
    except UserError as e:
        raise UserError(f"{where}: {e}") from None
    for key in ("a", "b"):
        if getattr(gap, key) not in names:
            raise UserError(f"{where}: {key} = {getattr(gap, key)!r} is not a [[runs]] entry")
    return gap


def _factor(raw: dict[str, Any], where: str) -> FactorSpec:
    levels = raw.get("levels", [])
    if not isinstance(levels, list) or not levels or not all(isinstance(x, dict) for x in levels):
        raise UserError(f"{where}: add its levels as [[factors.levels]] tables, each with a name")
    for level in levels:
        name = level.get("name")
        if not isinstance(name, str) or not name.replace("-", "").replace(".", "").isalnum():
            raise UserError(f'{where}: a level needs name = "..." (letters, digits, - and .)')
    try:
        factor = build_section(FactorSpec, {k: v for k, v in raw.items() if k != "levels"})
    except UserError as e:
        raise UserError(f"{where}: {e}") from None
    return replace(factor, levels=levels)


def _needed(gaps: list[GapSpec], entries: list[dict[str, Any]]) -> set[str]:
    """The entries the gaps measured at the levels compare, and those they are compute-matched
    to."""
    needed = {name for g in gaps if g.at_levels for name in (g.a, g.b)}
    matched = {e.get("name"): e.get("flops_of") for e in entries}
    for name in list(needed):
        partner = matched.get(name)
        if partner:
            needed.add(partner)
    return needed


def _blocks(rows: list[dict[str, Any]], group: str) -> dict[int, list[float]]:
    """seed -> the entry's mean serving NLL on each block of the shared held-out set (one block,
    the whole set, where the rows are not shared)."""
    out = {}
    for r in rows:
        if r["group"] == group and r.get("mean_serving_nll") is not None:
            blocks = (r.get("heldout_blocks") or {}).get("mean")
            out[int(r["seed"])] = list(blocks) if blocks else [r["mean_serving_nll"]]
    return out


def factor_table(
    rows: list[dict[str, Any]], gaps: list[GapSpec], factors: list[FactorSpec]
) -> dict[str, Any]:
    """Every gap at the base and at each level, each level's change of it, and the verdicts."""

    def matrix(level: str | None, gap: GapSpec) -> tuple[list[int], np.ndarray] | None:
        prefix = "" if level is None else f"{level}-"
        a, b = _blocks(rows, prefix + gap.a), _blocks(rows, prefix + gap.b)
        seeds = sorted(set(a) & set(b))
        if len(seeds) < 2:
            return None
        return seeds, paired_matrix(a, b, relative=True)

    entries: list[dict[str, Any]] = []
    for gap in gaps:
        base = matrix(None, gap)
        entries.append(_entry(gap, None, None, base, None))
        for factor in factors if gap.at_levels else []:
            for level in factor.level_names:
                entries.append(_entry(gap, factor, level, matrix(level, gap), base))
    changes = [e for e in entries if e.get("change") is not None]
    for e, rejected in zip(changes, holm([e["change"]["p"] for e in changes]), strict=True):
        e["change"]["holm_rejects"] = rejected
        e["change"]["verdict"] = _sign(e["change"]) if rejected else "cannot tell"
    for e in entries:
        if e["gap"] is not None:
            e["gap"]["verdict"] = _sign(e["gap"])
    return {
        "level": LEVEL,
        "gaps": [
            {"name": g.name, "a": g.a, "b": g.b, "primary": g.primary, "at_levels": g.at_levels}
            for g in gaps
        ],
        "factors": [{"name": f.name, "title": f.title, "base": f.base} for f in factors],
        "rows": entries,
    }


def _entry(
    gap: GapSpec,
    factor: FactorSpec | None,
    level: str | None,
    measured: tuple[list[int], np.ndarray] | None,
    base: tuple[list[int], np.ndarray] | None,
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": gap.name,
        "primary": gap.primary,
        "factor": None if factor is None else factor.name,
        "title": None if factor is None else factor.title,
        "level": level,
        "gap": None,
        "change": None,
    }
    if measured is None:
        return entry
    seeds, y = measured
    entry["gap"] = _interval(y, seeds)
    if base is not None:
        common = sorted(set(seeds) & set(base[0]))
        if len(common) >= 2:
            here = y[[seeds.index(s) for s in common]]
            there = base[1][[base[0].index(s) for s in common]]
            if here.shape == there.shape:
                entry["change"] = {**_interval(here - there, common), "from": float(there.mean())}
    return entry


def _interval(y: np.ndarray, seeds: list[int]) -> dict[str, Any]:
    interval = crossed_interval(y)
    return {
        "mean": interval.mean,
        "low": interval.low,
        "high": interval.high,
        "seeds": seeds,
        "blocks": interval.blocks,
        "p": two_sided_p(interval.mean, interval.se, interval.df),
    }


def _sign(quantity: dict[str, Any]) -> str:
    if quantity["low"] > 0:
        return "higher"
    if quantity["high"] < 0:
        return "lower"
    return "cannot tell"


def _percent(value: float) -> str:
    return f"{100 * value:+.2f}%"


def _cell(quantity: dict[str, Any] | None) -> tuple[str, str, str]:
    """(mean, interval, seeds) of a gap or a change, in percentage points."""
    if quantity is None:
        return "–", "–", "–"
    interval = f"[{_percent(quantity['low'])}, {_percent(quantity['high'])}]"
    return _percent(quantity["mean"]), interval, str(len(quantity["seeds"]))


def factors_markdown(table: dict[str, Any]) -> str:
    """factors.md: one row per gap and level, then a sentence per factor and gap."""
    titles = {f["name"]: (f["title"], f["base"]) for f in table["factors"]}
    lines = [
        "| gap | factor | level | gap (a/b - 1) | 95% interval | seeds | change vs base | "
        "95% interval | verdict (Holm) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in table["rows"]:
        gap, interval, seeds = _cell(row["gap"])
        change, change_interval, _ = _cell(row["change"])
        if row["factor"] is None:
            kind = "primary" if row["primary"] else "exploratory"
            verdict = f"{row['gap']['verdict']} ({kind})" if row["gap"] else "–"
            where = ("the regime", "base")
        else:
            verdict = row["change"]["verdict"] if row["change"] else "–"
            where = (titles[row["factor"]][0], row["level"])
        lines.append(
            f"| {row['name']} | {where[0]} | {where[1]} | {gap} | {interval} | {seeds} | "
            f"{change} | {change_interval} | {verdict} |"
        )
    lines += ["", *_sentences(table, titles)]
    lines += [
        "",
        "Gap: a's mean serving NLL / b's - 1, for each seed both ran, then its mean over the "
        "seeds; with a shared held-out set the interval covers the seeds and the set's blocks "
        "(docs/design.md §4). Change: the level's gap minus the base's, paired by seed. A "
        "primary gap is decided at 95%; the changes are exploratory, each verdict corrected for "
        f"all {sum(r['change'] is not None for r in table['rows'])} of them by Holm's method. "
        "Higher: a's NLL is further above b's (fixed-first trails by more).",
    ]
    return "\n".join(lines) + "\n"


def _sentences(table: dict[str, Any], titles: dict[str, tuple[str, str]]) -> list[str]:
    """One plain sentence per factor and gap: does the factor move the gap, and by how much."""
    out = []
    for row in table["rows"]:
        if row["factor"] is None or row["change"] is None:
            continue
        title, base = titles[row["factor"]]
        c = row["change"]
        moved = {
            "higher": "widens it",
            "lower": "narrows it",
            "cannot tell": "moves it by an amount the seeds cannot tell from zero",
        }[c["verdict"]]
        out.append(
            f"- {title}, {base} -> {row['level']}: the gap of {row['name']} goes from "
            f"{_percent(c['from'])} to {_percent(c['from'] + c['mean'])} over the same seeds; the "
            f"change {_percent(c['mean'])} "
            f"[{_percent(c['low'])}, {_percent(c['high'])}] {moved}."
        )
    return out
