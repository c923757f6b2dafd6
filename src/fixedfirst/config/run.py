"""A whole run's configuration: one instance of every section, to and from TOML-shaped dicts.

The data section has a nested table: `[data.KIND]` holds the options of the data source `kind`
names (see DataConfig). `to_dict` writes it back under the kind's name, so the dict (and the
TOML written from it) has the shape the user wrote. The model section is one of two: fixedfirst's
own looped transformer (`ModelConfig`), or with `kind = "transformers"` a transformers looped
architecture (`TransformersModelConfig`) and its table `[model.transformers]`; which features of
fixedfirst's own model a run of the other refuses is decided here, once (`foreign_refusals`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Any, TypeAlias

from fixedfirst.config.architectures import compiles_as_one_graph
from fixedfirst.config.checkpoints import checkpoint_model
from fixedfirst.config.schema import Section, build_section, require, shown
from fixedfirst.config.sections import (
    DataConfig,
    EvalConfig,
    ModelConfig,
    ScheduleConfig,
    TrainConfig,
    TransformersModelConfig,
)
from fixedfirst.config.switch import SwitchConfig
from fixedfirst.errors import UserError

ModelSection: TypeAlias = ModelConfig | TransformersModelConfig
"""A run's model: fixedfirst's own looped transformer, or a transformers looped architecture."""

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

    model: ModelSection = field(default_factory=ModelConfig)
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
        if isinstance(self.model, TransformersModelConfig):
            refused = foreign_refusals(self.model, self.train)
            if refused:
                raise UserError(refused[0])
        elif self.train.lowrank is not None:
            raise UserError(
                "train.lowrank: low-rank adapters are for a transformers looped architecture "
                '([model] kind = "transformers"); fixedfirst\'s own looped transformer trains '
                "every weight: remove [train.lowrank]"
            )
        if self.schedule.auto_switch and self.switch.rule == "depth-gap":
            deep = self.switch.probe_depth(self.schedule.k_max)
            require(
                deep > self.schedule.k0,
                "switch.depth",
                f"{deep} must be deeper than schedule.k0 = {self.schedule.k0} (depth-gap "
                "compares serving at K0 with serving deeper)",
            )

    def own_model(self, use: str) -> ModelConfig:
        """The model section of a run of fixedfirst's own looped transformer; for a run of a
        transformers architecture, the one-line refusal of `use`, which only ours has."""
        if isinstance(self.model, ModelConfig):
            return self.model
        raise UserError(
            f"{use} is for fixedfirst's own looped transformer; this run's model is "
            f'transformers\' {self.model.architecture} ([model] kind = "transformers")'
        )

    def to_dict(self) -> dict[str, dict[str, Any]]:
        out = {name: _section_dict(getattr(self, name)) for name in section_names()}
        for section, table in (("data", self.data.kind), ("model", "transformers")):
            options = out[section].pop("options", {})
            if options:
                out[section][table] = dict(options)
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
            elif section_cls is ModelConfig:
                sections["model"] = model_section(raw)
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


def model_section(raw: dict[str, Any]) -> ModelSection:
    """[model]: fixedfirst's looped transformer, or with `kind = "transformers"` a transformers
    architecture with its table [model.transformers] taken out as its options; with
    `checkpoint = DIR`, either one as DIR/config.json describes it (config/checkpoints.py)."""
    if "checkpoint" in raw:
        raw = checkpoint_model(raw)
    if "kind" not in raw:
        tables = [key for key, value in raw.items() if isinstance(value, dict)]
        if tables:
            raise UserError(
                f"[model.{tables[0]}] is the configuration of a transformers architecture: set "
                '[model] kind = "transformers" and architecture = NAME, or remove the table'
            )
        return build_section(ModelConfig, raw)
    own = {f.name for f in dataclasses.fields(ModelConfig)}
    fields = {f.name for f in dataclasses.fields(TransformersModelConfig)} - {"options"}
    for key, value in raw.items():
        if key in own and key not in fields:
            raise UserError(
                f"model.{key} is a key of fixedfirst's own looped transformer; a transformers "
                "architecture takes its configuration from [model.transformers] (leave "
                "model.kind out for ours)"
            )
        if isinstance(value, dict) and key != "transformers":
            raise UserError(
                f"[model.{key}]: a transformers architecture's configuration is the table "
                "[model.transformers]"
            )
    if "options" in raw:
        raise UserError("model.options: write the architecture's keys as [model.transformers]")
    scalars = {k: v for k, v in raw.items() if k != "transformers"}
    return build_section(
        TransformersModelConfig, {**scalars, "options": raw.get("transformers", {})}
    )


def foreign_refusals(model: TransformersModelConfig, train: TrainConfig) -> list[str]:
    """What a run of a transformers architecture cannot have of fixedfirst's own model's
    training features, one line each (docs/guides/configuration.md lists what applies)."""
    name = f"transformers' {model.architecture}"
    refused = []
    if train.grad_depth is not None:
        refused.append(
            f"train.grad_depth: truncated backprop is a feature of fixedfirst's own looped "
            f"transformer; {name} trains with full backprop: leave train.grad_depth out"
        )
    if train.compile is True:
        why = (
            "declares it cannot compile as one graph"
            if not compiles_as_one_graph(model.architecture)
            else "is not compiled by fixedfirst (only its own model's loop is)"
        )
        refused.append(
            f"train.compile = true: {name} {why}; set train.compile = false, or 'auto' "
            "(which trains it eagerly)"
        )
    return refused


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
