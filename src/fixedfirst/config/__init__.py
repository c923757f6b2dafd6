"""Run configuration: TOML sections loaded into validated dataclasses.

sections.py   [model] [schedule] [train] [data] [eval]: fields, docstrings, checks
architectures.py  [model] kind = "transformers": the looped architectures, checked and completed
lowrank.py    [train.lowrank]: low-rank adapters instead of full fine-tuning
switch.py     [switch]: how `schedule.switch = "auto"` decides
run.py        RunConfig: all sections, to and from TOML-shaped dicts
schema.py     raw values checked against the annotations (one-line errors naming the key)
files.py      TOML files, `--set` overrides, writing the resolved configuration back
"""

from fixedfirst.config.files import (
    apply_overrides,
    load_config,
    merge_tables,
    parse_override,
    read_toml,
    to_toml,
)
from fixedfirst.config.lowrank import LowRankConfig
from fixedfirst.config.run import SECTIONS, ModelSection, RunConfig, section_names
from fixedfirst.config.schema import Section, build_section, field_docs, require
from fixedfirst.config.sections import (
    DataConfig,
    EvalConfig,
    FinishingLR,
    ModelConfig,
    ScheduleConfig,
    TrainConfig,
    TransformersModelConfig,
)
from fixedfirst.config.switch import SwitchConfig

__all__ = [
    "SECTIONS",
    "DataConfig",
    "EvalConfig",
    "FinishingLR",
    "LowRankConfig",
    "ModelConfig",
    "ModelSection",
    "RunConfig",
    "ScheduleConfig",
    "Section",
    "SwitchConfig",
    "TrainConfig",
    "TransformersModelConfig",
    "apply_overrides",
    "build_section",
    "field_docs",
    "load_config",
    "merge_tables",
    "parse_override",
    "read_toml",
    "require",
    "section_names",
    "to_toml",
]
