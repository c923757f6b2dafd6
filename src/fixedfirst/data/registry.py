"""Data kinds: the one place that names every source of batches a run can train on.

`[data] kind = "NAME"` picks an entry of KINDS: the module that defines `KIND`, a `DataKind`
saying how to build the source from a run configuration, which options dataclass checks the
kind's own table `[data.NAME]`, and (for a task) how to score a checkpoint with the task's own
metric (`fixedfirst eval --task NAME`). Modules are named as strings and imported on first use,
so the library never imports an experiment: adding a task is a package under `experiments/`
plus one line here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from fixedfirst.config import RunConfig, build_section
from fixedfirst.data.source import BatchSource
from fixedfirst.errors import UserError

KINDS: dict[str, str] = {
    "synthetic": "fixedfirst.data.synthetic",
    "tokens": "fixedfirst.data.tokens",
    "bios": "fixedfirst.experiments.bios.task",
    "chains": "fixedfirst.experiments.chains.task",
}
"""kind -> the module defining its `KIND: DataKind`."""


@dataclass
class TaskReport:
    """A task's own metric of one checkpoint at several serving depths."""

    headline: str
    """One line: what was scored, e.g. 'recalled bits per person (100 people, ceiling 38.95)'."""
    table: str
    """A Markdown table, one row per serving depth."""
    record: dict[str, Any]
    """The numbers, JSON-ready (written by `fixedfirst eval --task`)."""
    score_name: str = ""
    """What `scores` measures, e.g. 'recalled bits per person'."""
    scores: dict[int, float] = field(default_factory=dict)
    """The task's headline number at each serving depth (what an ablation tabulates)."""


@dataclass
class ScoredSequence:
    """One token sequence as a model is scored on it (`fixedfirst inspect`): the inputs, what
    each position is scored against, and which positions hold a task's answers."""

    inputs: list[int]
    targets: list[int]
    """One per input: the next token, a task's label, or IGNORE_INDEX where nothing is scored."""
    title: str
    """What the sequence is, in words (e.g. 'chains evaluation sequence 3')."""
    answers: dict[int, str] = field(default_factory=dict)
    """Positions whose target is a task's answer -> what that answer is (e.g. '5 operations')."""


TaskEvaluation = Callable[[Any, RunConfig, list[int], "int | None"], TaskReport]
"""(model in eval mode, the run's configuration, serving depths, how many task examples to score
or None for the task's default) -> TaskReport."""


@dataclass(frozen=True)
class DataKind:
    name: str
    summary: str
    """One line for `fixedfirst config-reference`."""
    build: Callable[[RunConfig], BatchSource]
    """The source of a (resolved) run configuration; refuses data that does not fit the model."""
    options: type | None = None
    """The dataclass of `[data.NAME]` (with SECTION = 'data.NAME'), or None: no options."""
    evaluate: TaskEvaluation | None = None
    """The task's own metric, or None: validation NLL is all there is."""
    example: Callable[[RunConfig, int], ScoredSequence] | None = None
    """A task's example N, with its answers marked (`fixedfirst inspect --task-example N`)."""
    label: Callable[[RunConfig, list[int]], ScoredSequence] | None = None
    """A task's own targets for given ids (start token first), for a task whose targets are not
    the next tokens (chains labels every word with its chain's value); None: the next tokens."""


def data_kind(name: str) -> DataKind:
    """The data kind `name`, its module imported on first use."""
    if name not in KINDS:
        raise UserError(f"data.kind = {name!r} is not a known data kind; choose one of {known()}")
    kind = importlib.import_module(KINDS[name]).KIND
    assert kind.name == name, f"{KINDS[name]}.KIND is named {kind.name!r}, registered as {name!r}"
    return kind


def known() -> str:
    return ", ".join(KINDS)


def kind_options(config: RunConfig) -> Any:
    """The data kind's options of `config`, checked and with defaults filled in (None when the
    kind has no options)."""
    kind = data_kind(config.data.kind)
    if kind.options is None:
        if config.data.options:
            raise UserError(f"[data.{kind.name}]: the data kind {kind.name!r} takes no options")
        return None
    return build_section(kind.options, config.data.options)


def resolve_data(config: RunConfig) -> RunConfig:
    """`config` with its data kind checked and the kind's options complete (defaults written
    out), as a run directory stores it: a later change of a default cannot change a saved run."""
    options = kind_options(config)
    resolved = asdict(options) if options is not None else {}
    return replace(config, data=replace(config.data, options=resolved))


def build_source(config: RunConfig) -> BatchSource:
    """The batch source `[data] kind` names, built from the resolved configuration."""
    resolved = resolve_data(config)
    return data_kind(resolved.data.kind).build(resolved)
