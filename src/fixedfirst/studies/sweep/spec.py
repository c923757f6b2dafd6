"""A sweep file: one base configuration and named runs that each change a few keys of it.

The file's keys, seeds (an entry's own subset, if it names one), `flops_of` (compute-matched
runs) and `[[claims]]` are described in docs/guides/configuration.md; `[sweep]` and `[[claims]]` are
dataclasses checked by the same schema as a run configuration (settings.py, claims.py).
Everything is checked when the file is loaded, before anything trains, so a typo costs seconds
rather than the hour of training before it would be read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fixedfirst.compute.plan import UNIFORM_REFERENCE
from fixedfirst.compute.run_cost import run_plan
from fixedfirst.config import SECTIONS, RunConfig, build_section, merge_tables, read_toml
from fixedfirst.errors import UserError
from fixedfirst.files.paths import resolve_paths
from fixedfirst.studies.kit.claims import Claim
from fixedfirst.studies.kit.runs import PlannedRun
from fixedfirst.studies.kit.settings import distinct_seeds
from fixedfirst.studies.sweep.claims import claim_depth, read_claim
from fixedfirst.studies.sweep.factors import FactorSpec, GapSpec, load_factors
from fixedfirst.studies.sweep.settings import SweepSettings

TOP_LEVEL_KEYS = ("base", "sweep", "runs", "claims", "gaps", "factors")
RUN_KEYS = ("name", "flops_of", "seeds")
SECTION_NAMES = tuple(c.SECTION for c in SECTIONS)
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass
class SweepSpec:
    """A validated sweep: its runs in file order and how to report them."""

    path: Path
    runs: list[PlannedRun]
    settings: SweepSettings
    reference: str | None
    """The reference run (the first seed's run of the reference entry)."""
    figure3: str | None
    """The Figure 3 run (the first seed's run of its entry)."""
    flops_of: dict[str, str]
    """run name -> the run whose modeled FLOPs it is matched to."""
    groups: dict[str, str]
    """run name -> its [[runs]] entry (the same entry's runs differ only in train.seed)."""
    claims: list[Claim] = field(default_factory=list)
    gaps: list[GapSpec] = field(default_factory=list)
    """[[gaps]]: the relative gaps a factor study measures at every level (factors.py)."""
    factors: list[FactorSpec] = field(default_factory=list)

    @property
    def seeds(self) -> list[int] | None:
        return self.settings.seeds

    @property
    def metric(self) -> str:
        """`nll`: mean serving NLL; `task`: the data kind's own metric (DataKind.evaluate)."""
        return self.settings.metric

    @property
    def switch_study(self) -> bool:
        return self.settings.switch_study

    @property
    def reference_group(self) -> str | None:
        """The [[runs]] entry of the reference run."""
        return None if self.reference is None else self.groups[self.reference]

    def run(self, name: str) -> PlannedRun:
        return next(r for r in self.runs if r.name == name)

    def select(self, only: list[str] | None) -> list[PlannedRun]:
        """The runs named in `only` (in file order), or all of them; an entry's name stands for
        every seed of it (`uniform` for `uniform-seed0`, `uniform-seed1`, ...)."""
        if not only:
            return list(self.runs)
        entries = list(dict.fromkeys(self.groups[r.name] for r in self.runs))
        known = set(entries) | {r.name for r in self.runs}
        unknown = [n for n in only if n not in known]
        if unknown:
            listed = ", ".join(entries)
            per_seed = " (each also as NAME-seedN)" if self.seeds is not None else ""
            raise UserError(
                f"--only: no run or entry named {unknown[0]!r} in {self.path}; "
                f"entries{per_seed}: {listed}"
            )
        return [r for r in self.runs if r.name in only or self.groups[r.name] in only]


def _table(value: Any, key: str, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise UserError(f"{where}: {key} must be a table of key = value lines")
    return value


def _unknown(keys, valid, where: str, what: str = "key") -> None:
    for key in keys:
        if key not in valid:
            raise UserError(f"{where}: unknown {what} {key!r}; valid: " + ", ".join(valid))


def _base_dict(raw: dict[str, Any], path: Path) -> dict[str, Any]:
    """The base configuration as raw TOML data, from a file or from inline [base.*] sections."""
    if "base" not in raw:
        raise UserError(
            f'{path}: no base configuration; add base = "RUN.toml" (a run config file) or '
            "inline [base.model], [base.train], ... sections"
        )
    base = raw["base"]
    if isinstance(base, str):
        base_path = Path(base) if Path(base).is_absolute() else path.parent / base
        try:
            return resolve_paths(read_toml(base_path), base_path.parent)
        except UserError as e:
            raise UserError(f"{path}: base: {e}") from None
    if not isinstance(base, dict):
        raise UserError(f"{path}: base must be a file name or [base.SECTION] tables")
    _unknown(base, SECTION_NAMES, f"{path}: [base]", "section")
    return resolve_paths(base, path.parent)


def _with_run_keys(base: dict[str, Any], run: dict[str, Any], where: str) -> dict[str, Any]:
    """The base with a run's `section.key = value` entries applied on top (like --set)."""
    merged = {k: dict(v) for k, v in base.items()}
    for section, values in run.items():
        if section in RUN_KEYS:
            continue
        if section not in SECTION_NAMES:
            _unknown([section], [*RUN_KEYS, *SECTION_NAMES], where)
        merged[section] = merge_tables(merged.get(section, {}), _table(values, section, where))
    return merged


def _build_config(data: dict[str, Any], where: str) -> RunConfig:
    try:
        config = RunConfig.from_dict(data)
        run_plan(config)  # a budget below one step is an error now, not after other runs
    except UserError as e:
        raise UserError(f"{where}: {e}") from None
    return config


def _run_name(entry: dict[str, Any], index: int, path: Path) -> str:
    name = entry.get("name")
    if name is None:
        raise UserError(f'{path}: runs[{index}] has no name; add name = "..."')
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise UserError(
            f"{path}: runs[{index}].name = {name!r}: use letters, digits, '.', '_' and '-' "
            "(it names the run's directory)"
        )
    return name


def load_sweep(path: str | Path) -> SweepSpec:
    """Read and validate a sweep file; every run's configuration is built and checked."""
    return parse_sweep(read_toml(path), path)


def parse_sweep(raw: dict[str, Any], path: str | Path) -> SweepSpec:
    """A sweep file's contents, validated as `load_sweep` does: what a script that changes a
    committed sweep's budget before it runs (benchmarks/gpu_questions.py) hands over, with the
    file's path for the messages and the relative data paths."""
    path = Path(path)
    _unknown(raw, TOP_LEVEL_KEYS, str(path))
    base = _base_dict(raw, path)
    _build_config(base, f"{path}: base")
    settings = _settings(_table(raw.get("sweep", {}), "[sweep]", str(path)), path)

    entries = raw.get("runs")
    if not isinstance(entries, list) or not entries:
        raise UserError(f'{path}: no runs; add [[runs]] tables, each with name = "..."')
    if not all(isinstance(e, dict) for e in entries):
        raise UserError(f"{path}: runs must be [[runs]] tables of key = value lines")
    gaps, factors, entries = load_factors(raw, entries, path)
    seeds = settings.seeds
    entry_names: list[str] = []
    runs: list[PlannedRun] = []
    groups: dict[str, str] = {}
    flops_of: dict[str, str] = {}
    entry_seeds: dict[str, list[int] | list[None]] = {}
    for index, entry in enumerate(entries):
        entry = _table(entry, f"runs[{index}]", str(path))
        name = _run_name(entry, index, path)
        if name in entry_names:
            raise UserError(f"{path}: two runs are named {name!r}; run names must be unique")
        entry_names.append(name)
        where = f'{path}: run "{name}"'
        if seeds is not None and "seed" in entry.get("train", {}):
            raise UserError(f"{where}: sets train.seed, but [sweep] seeds sets every run's seed")
        entry_seeds[name] = _entry_seeds(entry, seeds, where)
        if "flops_of" in entry:
            _check_flops_of(entry["flops_of"], entry, entry_names, flops_of, where)
        for seed in entry_seeds[name]:
            run = name if seed is None else f"{name}-seed{seed}"
            data = _with_run_keys(base, resolve_paths(entry, path.parent), where)
            if seed is not None:
                data.setdefault("train", {})["seed"] = seed
            if "flops_of" in entry:
                target = _named(entry["flops_of"], seed)
                if seed not in entry_seeds[entry["flops_of"]]:
                    raise UserError(
                        f"{where}: trains seed {seed}, but flops_of = {entry['flops_of']!r} does "
                        "not; give the two entries the same seeds"
                    )
                target_config = next(r.config for r in runs if r.name == target)
                if target_config.schedule.auto_switch:
                    raise UserError(
                        f"{where}: flops_of = {entry['flops_of']!r} is an auto-switch run, whose "
                        "cost is known only once it has switched; match a run of fixed schedule"
                    )
                flops_of[run] = target
                data.setdefault("train", {})["flops"] = run_plan(target_config).flops
            runs.append(PlannedRun(run, _build_config(data, where)))
            groups[run] = name

    first = {name: _named(name, entry_seeds[name][0]) for name in entry_names}
    _check_metric(settings, runs, path)
    _check_switch_study(settings, runs, path)
    return SweepSpec(
        path=path,
        runs=runs,
        settings=settings,
        reference=_reference(settings, runs, first, path),
        figure3=_figure3(settings, runs, first, path),
        flops_of=flops_of,
        groups=groups,
        claims=_claims(raw.get("claims", []), entry_names, settings, path),
        gaps=gaps,
        factors=factors,
    )


def _settings(raw: dict[str, Any], path: Path) -> SweepSettings:
    try:
        return build_section(SweepSettings, raw)
    except UserError as e:
        raise UserError(f"{path}: {e}") from None


def _entry_seeds(entry: dict[str, Any], seeds: list[int] | None, where: str):
    """The seeds an entry trains: its own `seeds`, a subset of [sweep] seeds, or all of them
    ([None] without seeds: one run named after the entry)."""
    if "seeds" not in entry:
        return list(seeds) if seeds is not None else [None]
    own = entry["seeds"]
    if seeds is None:
        raise UserError(f"{where}: sets seeds, but [sweep] has none; set [sweep] seeds first")
    if (
        not isinstance(own, list)
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in own)
        or not distinct_seeds(own)
        or not set(own) <= set(seeds)
    ):
        raise UserError(
            f"{where}: seeds = {own!r} must be distinct seeds of [sweep] seeds = {seeds} "
            "(the entry then trains only those)"
        )
    return [s for s in seeds if s in own]


def _named(entry: str, seed: int | None) -> str:
    """The run of [[runs]] entry `entry` with `seed` (the entry itself without seeds)."""
    return entry if seed is None else f"{entry}-seed{seed}"


def _check_metric(settings: SweepSettings, runs: list[PlannedRun], path: Path) -> None:
    from fixedfirst.data.registry import data_kind

    if settings.metric == "task":
        for planned in runs:
            if data_kind(planned.config.data.kind).evaluate is None:
                raise UserError(
                    f'{path}: sweep.metric = "task", but run "{planned.name}" trains on '
                    f"data.kind = {planned.config.data.kind!r}, which has no task metric"
                )


def _check_switch_study(settings: SweepSettings, runs: list[PlannedRun], path: Path) -> None:
    if settings.switch_study and not any(r.config.schedule.kind == "fixed-first" for r in runs):
        raise UserError(f"{path}: sweep.switch_study needs fixed-first runs; the sweep has none")


def _check_flops_of(
    target: Any, entry: dict[str, Any], names: list[str], flops_of: dict[str, str], where: str
) -> None:
    if not isinstance(target, str) or target not in names[:-1]:
        raise UserError(
            f"{where}: flops_of = {target!r} must name a run listed above this one "
            "(its modeled FLOPs become this run's train.flops)"
        )
    if any(t == target or t.startswith(f"{target}-seed") for t in flops_of):
        raise UserError(
            f"{where}: flops_of = {target!r} is itself compute-matched; match the original run"
        )
    if "flops" in entry.get("train", {}):
        raise UserError(f"{where}: set either flops_of or train.flops, not both")


def _reference(
    settings: SweepSettings, runs: list[PlannedRun], first: dict[str, str], path: Path
) -> str | None:
    name = settings.reference
    if name is None:
        return None
    matches = [r for r in runs if r.name == first.get(name, name)]
    if not matches:
        raise UserError(f"{path}: sweep.reference = {name!r} is not one of the runs")
    s = matches[0].config.schedule
    ref = UNIFORM_REFERENCE
    if (s.kind, s.k_min, s.k_max) != (ref.kind, ref.k_min, ref.k_max):
        raise UserError(
            f"{path}: sweep.reference = {name!r} must train uniform {ref.k_min}..{ref.k_max}, "
            "the schedule modeled savings are measured against"
        )
    if matches[0].config.train.flops is not None:
        raise UserError(f"{path}: sweep.reference = {name!r} must use the token budget, not flops")
    return matches[0].name


def _figure3(
    settings: SweepSettings, runs: list[PlannedRun], first: dict[str, str], path: Path
) -> str | None:
    """The named Figure 3 run, or by default the first fixed-first run (None if there is none)."""
    name = settings.figure3
    if name is None:
        return next((r.name for r in runs if r.config.schedule.kind == "fixed-first"), None)
    matches = [r for r in runs if r.name == first.get(name, name)]
    if not matches:
        raise UserError(f"{path}: sweep.figure3 = {name!r} is not one of the runs")
    if matches[0].config.schedule.kind != "fixed-first":
        raise UserError(
            f"{path}: sweep.figure3 = {name!r} must be a fixed-first run (it has a switch)"
        )
    return matches[0].name


def _claims(entries: Any, names: list[str], settings: SweepSettings, path: Path) -> list[Claim]:
    """The [[claims]] tables, checked: names of [[runs]] entries, a metric, measure and side."""
    seeds = settings.seeds
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise UserError(f"{path}: claims must be [[claims]] tables of key = value lines")
    if entries and (seeds is None or len(seeds) < 2):
        raise UserError(
            f"{path}: [[claims]] are decided by intervals over seeds; set [sweep] seeds to at "
            "least 2 seeds, e.g. seeds = [0, 1, 2]"
        )
    claims = [_claim(entry, names, f"{path}: claims[{i}]") for i, entry in enumerate(entries)]
    for i, claim in enumerate(claims):
        depth = claim_depth(claim)
        if depth is not None and depth not in settings.eval_depths:
            raise UserError(
                f"{path}: claims[{i}]: metric = {claim.of!r}, but the final evaluation's "
                f"depths are {settings.eval_depths} (sweep.eval_depths)"
            )
    return claims


def _claim(entry: dict[str, Any], names: list[str], where: str) -> Claim:
    try:
        claim = read_claim(entry)
    except UserError as e:
        raise UserError(f"{where}: {e}") from None
    for key in ("a", "b"):
        if getattr(claim, key) not in names:
            raise UserError(
                f"{where}: {key} = {getattr(claim, key)!r} is not a [[runs]] entry; entries: "
                + ", ".join(names)
            )
    return claim
