"""Data kinds: every source of batches a run can train on, as the modules defining them register
them.

`[data] kind = "NAME"` picks the `DataKind` registered under NAME: how to build the source from
a run configuration, which options dataclass checks the kind's own table `[data.NAME]`, and (for
a task) how to score a checkpoint with the task's own metric (`fixedfirst eval --task NAME`).
A module defines its kind and calls `register_kind` when it is imported. The library's own kinds
(`synthetic`, `tokens`) are imported by `fixedfirst.data`; a task's kind is registered when its
package is imported (the `fixedfirst` command imports `fixedfirst.tasks` before it runs a command),
so this module names no task, and a new task is a package that registers itself
(docs/development/extending.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from fixedfirst.config import RunConfig, Section, build_section
from fixedfirst.data.source import BatchSource
from fixedfirst.errors import UserError


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
    options: type[Section] | None = None
    """The dataclass of `[data.NAME]` (with SECTION = 'data.NAME'), or None: no options."""
    evaluate: TaskEvaluation | None = None
    """The task's own metric, or None: validation NLL is all there is."""
    example: Callable[[RunConfig, int], ScoredSequence] | None = None
    """A task's example N, with its answers marked (`fixedfirst inspect --task-example N`)."""
    label: Callable[[RunConfig, list[int]], ScoredSequence] | None = None
    """A task's own targets for given ids (start token first), for a task whose targets are not
    the next tokens (chains labels every word with its chain's value); None: the next tokens."""


KINDS: dict[str, DataKind] = {}
"""The registered data kinds by name, in the order they were registered (`register_kind`)."""


def register_kind(kind: DataKind) -> DataKind:
    """Make `[data] kind = kind.name` build batches with `kind`; returns it (`KIND =
    register_kind(DataKind(...))`). Registering the same kind again does nothing; another kind
    under a name already taken is refused, so two tasks cannot shadow each other."""
    existing = KINDS.get(kind.name)
    if existing is not None and existing != kind:
        raise ValueError(f"a different data kind is already registered as {kind.name!r}")
    KINDS[kind.name] = kind
    return kind


def data_kind(name: str) -> DataKind:
    """The registered data kind `name`."""
    if name not in KINDS:
        raise UserError(f"data.kind = {name!r} is not a known data kind; choose one of {known()}")
    return KINDS[name]


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
