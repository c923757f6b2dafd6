"""A whole run's configuration: one instance of every section, to and from TOML-shaped dicts.

The data section is the one with a nested table: `[data.KIND]` holds the options of the data
source `kind` names (see DataConfig). `to_dict` writes it back under the kind's name, so the
dict (and the TOML written from it) has the shape the user wrote.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Any

from fixedfirst.config.schema import Section, build_section, require, shown
from fixedfirst.config.sections import (
    DataConfig,
    EvalConfig,
    ModelConfig,
    ScheduleConfig,
    TrainConfig,
)
from fixedfirst.config.switch import SwitchConfig
from fixedfirst.errors import UserError

SECTIONS: tuple[type[Section], ...] = (
    ModelConfig,
    ScheduleConfig,
    SwitchConfig,
    TrainConfig,
    DataConfig,
    EvalConfig,
)


def section_names() -> list[str]:
    return [c.SECTION for c in SECTIONS]


@dataclass
class RunConfig:
    """A whole run: one instance of every section."""

    model: ModelConfig = field(default_factory=ModelConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    switch: SwitchConfig = field(default_factory=SwitchConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    data: DataConfig = field(default_factory=DataConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self) -> None:
        require(
            self.train.seq_len <= self.model.max_seq_len,
            "train.seq_len",
            f"{self.train.seq_len} exceeds model.max_seq_len = {self.model.max_seq_len}",
        )
        if self.schedule.auto_switch and self.switch.rule == "depth-gap":
            deep = self.switch.probe_depth(self.schedule.k_max)
            require(
                deep > self.schedule.k0,
                "switch.depth",
                f"{deep} must be deeper than schedule.k0 = {self.schedule.k0} (depth-gap "
                "compares serving at K0 with serving deeper)",
            )

    def to_dict(self) -> dict[str, dict[str, Any]]:
        out = {name: _section_dict(getattr(self, name)) for name in section_names()}
        options = out["data"].pop("options", {})
        if options:
            out["data"][self.data.kind] = dict(options)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        for key, value in data.items():
            if not isinstance(value, dict) and key not in section_names():
                raise UserError(_top_level_key(key, value))
        unknown = sorted(set(data) - set(section_names()))
        if unknown:
            raise UserError(
                f"unknown section [{unknown[0]}]; valid sections: "
                + ", ".join(f"[{n}]" for n in section_names())
            )
        sections: dict[str, Any] = {}
        for section_cls in SECTIONS:
            raw = data.get(section_cls.SECTION, {})
            if not isinstance(raw, dict):
                raise UserError(f"[{section_cls.SECTION}] must be a table of key = value lines")
            if section_cls is DataConfig:
                sections["data"] = _data_section(raw)
            else:
                sections[section_cls.SECTION] = build_section(section_cls, raw)
        return cls(**sections)


def _top_level_key(key: str, value: Any) -> str:
    """The message for `key = value` written above the first [section] header, where TOML
    reads it as a key of the file itself rather than of any section."""
    homes = [
        f"[{c.SECTION}]"
        for c in SECTIONS
        if any(f.name == key and not f.metadata.get("table") for f in dataclasses.fields(c))
    ]
    where = (
        f"move it below {' or '.join(homes)}"
        if homes
        else "no section has that key; valid sections: "
        + ", ".join(f"[{n}]" for n in section_names())
    )
    return (
        f"{key} = {shown(value)} is a top-level key (it comes before the first [section] "
        f"header), and every key belongs to a section: {where}"
    )


def _section_dict(section: Any) -> dict[str, Any]:
    return {k: v for k, v in asdict(section).items() if v is not None}


def _data_section(raw: dict[str, Any]) -> DataConfig:
    """[data] with its one nested table [data.KIND] taken out as the kind's options."""
    scalars = {k: v for k, v in raw.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in raw.items() if isinstance(v, dict)}
    if "options" in scalars:
        raise UserError("data.options: write a kind's options as the table [data.KIND]")
    kind = scalars.get("kind", DataConfig.kind)
    for name in tables:
        if name != kind:
            raise UserError(
                f"[data.{name}] holds options of the data kind {name!r}, but data.kind = "
                f"{kind!r}; set data.kind = {name!r} or remove the table"
            )
    fields = {f.name for f in dataclasses.fields(DataConfig) if not f.metadata.get("table")}
    for key in scalars:
        if key not in fields:
            raise UserError(
                f"unknown key data.{key}; valid keys in [data]: {', '.join(sorted(fields))}; a "
                f"data kind's own options go in its table [data.{kind}] (e.g. [data.bios] "
                "people = 100), in a run's config.toml as well"
            )
    section = build_section(DataConfig, scalars)
    section.options = dict(tables.get(kind, {}))
    return section
