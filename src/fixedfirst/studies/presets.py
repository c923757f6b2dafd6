"""Experiment presets: a TOML file with the run sections every run shares and an [experiment]
section of the experiment's own settings, plus the schedules the paper compares.

A preset is shipped with its experiment (`studies/NAME/presets/PRESET.toml`, chosen by name)
or given as a path. `--set` overrides go to the [experiment] section (`experiment.KEY=VALUE`) or
to the shared run sections; a preset has no [schedule], since the experiment trains each of its
schedules on the shared sections.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any

from fixedfirst.config import (
    RunConfig,
    Section,
    apply_overrides,
    build_section,
    parse_override,
    read_toml,
)
from fixedfirst.errors import UserError

PAPER_SCHEDULES: dict[str, list[str]] = {
    "fixed-4": ["schedule.kind=fixed", "schedule.depth=4"],
    "uniform-1-16": ["schedule.kind=uniform", "schedule.k_min=1", "schedule.k_max=16"],
    "fixed-first-4-0.8": [
        "schedule.kind=fixed-first",
        "schedule.k0=4",
        "schedule.switch=0.8",
        "schedule.finish=uniform",
        "schedule.k_min=1",
        "schedule.k_max=16",
    ],
    "fixed-first-2-0.67": [
        "schedule.kind=fixed-first",
        "schedule.k0=2",
        "schedule.switch=0.67",
        "schedule.finish=uniform",
        "schedule.k_min=1",
        "schedule.k_max=16",
    ],
    "progressive": ["schedule.kind=progressive", "schedule.k_min=1", "schedule.k_max=16"],
}
"""Run name -> schedule overrides: the schedules of the paper (fixed, uniform 1..16, fixed-first
at its two settings, McLeish et al.'s progressive curriculum to mean depth 8.5)."""

SCHEDULE_LABELS = {
    "fixed-4": "fixed K=4",
    "uniform-1-16": "uniform 1..16",
    "fixed-first-4-0.8": "fixed-first K0=4, switch 0.8",
    "fixed-first-2-0.67": "fixed-first K0=2, switch 0.67",
    "progressive": "progressive to 8.5",
}


@dataclass
class PresetFile:
    """A preset as read: the experiment's settings (its dataclass) and the shared run sections."""

    name: str
    experiment: Any
    base: dict[str, Any]

    def run_config(self, overrides: list[str]) -> RunConfig:
        """One run's configuration: the shared sections plus `overrides` (schedule, seed, ...)."""
        return RunConfig.from_dict(apply_overrides(self.base, overrides))


def read_preset(
    package: str,
    shipped: tuple[str, ...],
    name: str,
    overrides: list[str] | None,
    settings: type[Section],
) -> PresetFile:
    """Preset `name` of the experiment in `package` (one of `shipped`, or a path to a .toml),
    with `--set` overrides; its [experiment] section built as `settings`."""
    if name in shipped:
        with resources.as_file(resources.files(package) / "presets" / f"{name}.toml") as path:
            raw = read_toml(path)
    elif name.endswith(".toml"):
        raw = read_toml(name)
    else:
        raise UserError(
            f"--preset {name!r}: unknown preset; choose one of {', '.join(shipped)} "
            "or give a path to a preset .toml file"
        )
    experiment_overrides = [o for o in overrides or [] if o.startswith("experiment.")]
    run_overrides = [o for o in overrides or [] if not o.startswith("experiment.")]
    raw = apply_overrides(raw, run_overrides)
    experiment_raw = dict(raw.pop("experiment", {}))
    for text in experiment_overrides:
        _, key, value = parse_override(text)
        experiment_raw[key] = value
    if "schedule" in raw:
        raise UserError("a preset has no [schedule]: the experiment trains each of its schedules")
    return PresetFile(name, build_section(settings, experiment_raw), raw)
