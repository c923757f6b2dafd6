"""Studies made from a preset (bios, chains, the ablation): every arm of the study trained with
every seed on the run sections of a preset to one modeled FLOP budget; and the schedules the
paper compares.

A preset is a TOML file with the run sections every run shares and an [experiment] section of
the study's own settings, shipped with its study (`studies/NAME/presets/PRESET.toml`, chosen by
name) or given as a path. `--set` overrides go to the [experiment] section
(`experiment.KEY=VALUE`) or to the shared run sections; a preset has no [schedule], since the
study trains each of its arms' schedules on the shared sections.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from fixedfirst.config import (
    RunConfig,
    ScheduleConfig,
    Section,
    apply_overrides,
    build_section,
    parse_override,
    read_toml,
)
from fixedfirst.errors import UserError
from fixedfirst.studies.kit.conduct import Study
from fixedfirst.studies.kit.runs import PlannedRun, RunOutcome


def named_schedule(name: str, k_max: int) -> ScheduleConfig:
    """The schedule an arm is named after: fixed-K, uniform-1-K, fixed-first-K0-SWITCH (finishing
    uniform over 1..k_max) or progressive (to k_max)."""
    if name == "progressive":
        return ScheduleConfig(kind="progressive", k_min=1, k_max=k_max)
    if name.startswith("fixed-first-"):
        k0, switch = name.removeprefix("fixed-first-").split("-")
        return ScheduleConfig(
            kind="fixed-first",
            k0=int(k0),
            switch=float(switch),
            finish="uniform",
            k_min=1,
            k_max=k_max,
        )
    kind, *depths = name.split("-")
    if kind == "fixed":
        return ScheduleConfig(kind="fixed", depth=int(depths[0]))
    return ScheduleConfig(kind="uniform", k_min=int(depths[0]), k_max=int(depths[1]))


PAPER_SCHEDULES = {
    name: named_schedule(name, 16)
    for name in (
        "fixed-4",
        "uniform-1-16",
        "fixed-first-4-0.8",
        "fixed-first-2-0.67",
        "progressive",
    )
}
"""Run name -> schedule: the schedules of the paper (fixed, uniform 1..16, fixed-first at its two
settings, McLeish et al.'s progressive curriculum to mean depth 8.5)."""


@dataclass
class Arm:
    """What the runs of one arm change in the shared sections: the schedule they train with, and
    fields of [model] and [train] (checked when each run's sections are built)."""

    schedule: ScheduleConfig
    model: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)


class Budget(Protocol):
    """A preset study's own settings hold its FLOP budget and its seeds."""

    flops: float
    seeds: list[int]


S = TypeVar("S", bound=Budget)
T = TypeVar("T", bound="PresetStudy[Any]")


@dataclass(frozen=True)
class Evaluated:
    """A reported run with its arm and seed, and its evaluations' results in its jobs' order."""

    arm: str
    seed: int
    config: RunConfig
    outcome: RunOutcome
    values: list[Any]


@dataclass
class PresetStudy(Study, Generic[S]):
    """Every arm (`arms`) trained with every seed on the shared sections, to the FLOP budget:
    run ARM-seedN in DIR/runs/. Its results are made from each run's evaluations (`results`)."""

    preset: str
    """The preset's name, or its path."""
    base: dict[str, Any]
    """The raw run sections every run shares."""
    experiment: S
    """The study's own settings."""

    PACKAGE: ClassVar[str]
    """The study's package, whose presets/ holds the shipped presets."""
    PRESETS: ClassVar[tuple[str, ...]] = ()
    """The shipped presets' names."""
    SETTINGS: ClassVar[type[Section]]
    """The study's own settings: its preset's [experiment] section."""
    DATA_KIND: ClassVar[str | None] = None
    """The data kind its runs must train on (its scoring reads that task), if one."""

    @abstractmethod
    def arms(self) -> dict[str, Arm]:
        """Arm name -> what its runs change, in the study's order."""

    @abstractmethod
    def results(self, evaluated: list[Evaluated]) -> dict[str, Any]:
        """results.json's document from the reported runs and their evaluations."""

    def run_config(self, arm: str, seed: int) -> RunConfig:
        chosen = self.arms()[arm]
        config = RunConfig.from_dict(self.base)
        return replace(
            config,
            model=replace(config.model, **chosen.model),
            schedule=replace(chosen.schedule),
            train=replace(config.train, flops=self.experiment.flops, seed=seed, **chosen.train),
        )

    def runs(self) -> list[PlannedRun]:
        runs = [
            PlannedRun(f"{arm}-seed{seed}", self.run_config(arm, seed))
            for arm in self.arms()
            for seed in self.experiment.seeds
        ]
        kind = runs[0].config.data.kind
        if self.DATA_KIND is not None and kind != self.DATA_KIND:
            raise UserError(
                f"a {self.name} preset trains on [data] kind = {self.DATA_KIND!r}, not {kind!r}"
            )
        return runs

    def collect(self, outcomes: list[RunOutcome], quiet: bool) -> dict[str, Any]:
        """Each run's evaluations made here, in order, each read back from its cache beside the
        run (or measured now), then `results`."""
        evaluated = []
        for outcome in outcomes:
            arm, seed = outcome.name.rsplit("-seed", 1)
            planned = PlannedRun(outcome.name, self.run_config(arm, int(seed)))
            values = []
            for job in self.evaluations(planned, outcome.path):
                started = time.perf_counter()
                values.append(job.call(*job.args))
                if not quiet and job.say is not None:
                    job.say(values[-1], time.perf_counter() - started)
            evaluated.append(Evaluated(arm, int(seed), planned.config, outcome, values))
        return self.results(evaluated)

    @classmethod
    def load(cls: type[T], name: str, overrides: list[str] | None = None) -> T:
        """The study of preset `name` (a shipped one, or a path to a .toml) with `--set`
        overrides, every run's sections checked."""
        if name in cls.PRESETS:
            shipped = resources.files(cls.PACKAGE) / "presets" / f"{name}.toml"
            with resources.as_file(shipped) as path:
                raw = read_toml(path)
        elif name.endswith(".toml"):
            raw = read_toml(name)
        else:
            raise UserError(
                f"--preset {name!r}: unknown preset; choose one of {', '.join(cls.PRESETS)} "
                "or give a path to a preset .toml file"
            )
        experiment_overrides = [o for o in overrides or [] if o.startswith("experiment.")]
        raw = apply_overrides(raw, [o for o in overrides or [] if o not in experiment_overrides])
        experiment_raw = dict(raw.pop("experiment", {}))
        for text in experiment_overrides:
            _, key, value = parse_override(text)
            experiment_raw[key] = value
        if "schedule" in raw:
            raise UserError(
                "a preset has no [schedule]: the experiment trains each of its schedules"
            )
        study = cls(name, raw, build_section(cls.SETTINGS, experiment_raw))
        study.runs()
        return study
