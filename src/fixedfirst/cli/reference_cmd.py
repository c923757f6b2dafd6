"""`fixedfirst config-reference`: every configuration key, its default and what it means: the run
sections, each data kind's options, the `[experiment]` section of the study presets and the
`[sweep]`, `[[claims]]`, `[[gaps]]` and `[[factors]]` tables of a sweep file."""

from __future__ import annotations

import argparse
from dataclasses import MISSING, fields

from fixedfirst.config import (
    SECTIONS,
    LowRankConfig,
    ModelConfig,
    TrainConfig,
    TransformersModelConfig,
    field_docs,
)


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    parser.set_defaults(run=run)


def _print_table(title: str, doc: str, rows: list[tuple[str, str, str]], markdown: bool) -> None:
    if markdown:
        print(f"**{title}** {doc}\n")
        print("| key | default | meaning |\n| --- | --- | --- |")
        for name, default, meaning in rows:
            print(f"| `{name}` | `{default}` | {meaning.replace('|', '/')} |")
    else:
        print(title)
        for name, default, meaning in rows:
            print(f"  {name} = {default}\n      {meaning}")
    print()


def _print_transformers_model(markdown: bool) -> None:
    """[model] with `kind = "transformers"`: its keys, the architectures, and which of our own
    model's features such a run has."""
    from fixedfirst.config.architectures import ARCHITECTURES, OWN_FEATURES

    section = TransformersModelConfig
    title = '[model] with kind = "transformers"'
    _print_table(title, _summary(section), field_docs(section), markdown)
    known = ", ".join(f"`{a.name}` (transformers >= {a.since})" for a in ARCHITECTURES.values())
    if markdown:
        print(f"Architectures: {known}. What such a run has of fixedfirst's own model:\n")
        print("| feature | a transformers architecture |\n| --- | --- |")
        print("\n".join(f"| {feature} | {applies} |" for feature, applies in OWN_FEATURES))
    else:
        print(f"  architectures: {known}")
        print("\n".join(f"  {feature}: {applies}" for feature, applies in OWN_FEATURES))
    print()


def _study_sections() -> list[tuple[str, str, list[tuple[str, str, str]]]]:
    """(title, what it is, its keys) for the tables the studies read beside run sections."""
    from fixedfirst.studies.bios.analysis import BIOS_CLAIMS
    from fixedfirst.studies.bios.experiment import ExperimentConfig as BiosExperiment
    from fixedfirst.studies.chains.experiment import ExperimentConfig as ChainsExperiment
    from fixedfirst.studies.kit.depth_arms import BAND_CLAIMS
    from fixedfirst.studies.sweep.claims import CLAIMS
    from fixedfirst.studies.sweep.factors import FactorSpec, GapSpec
    from fixedfirst.studies.sweep.settings import SweepSettings

    preset = (
        "A `fixedfirst {}` preset's own section (`--preset FILE`, or "
        "`--set experiment.KEY=VALUE`); its other sections are a run's, without [schedule]."
    )
    sweep = " (a sweep file)"
    return [
        ("[experiment] (bios)", preset.format("bios"), field_docs(BiosExperiment)),
        ("[[experiment.primary]] (bios)", BIOS_CLAIMS.summary(), BIOS_CLAIMS.docs()),
        ("[experiment] (chains)", preset.format("chains"), field_docs(ChainsExperiment)),
        ("[[experiment.primary]] (chains)", BAND_CLAIMS.summary(), BAND_CLAIMS.docs()),
        ("[sweep]" + sweep, _summary(SweepSettings), field_docs(SweepSettings)),
        ("[[claims]]" + sweep, CLAIMS.summary(), CLAIMS.docs()),
        *(
            (f"[[{s.SECTION}]]{sweep}", _summary(s) + _required(s), field_docs(s))
            for s in (GapSpec, FactorSpec)
        ),
    ]


def _required(section: type) -> str:
    """' Required: `a`, `b`.' for the keys a table must give (nested tables aside)."""
    names = [
        f"`{f.name}`"
        for f in fields(section)
        if f.default is MISSING and f.default_factory is MISSING and not f.metadata.get("table")
    ]
    return f" Required: {', '.join(names)}." if names else ""


def _summary(section: type) -> str:
    return " ".join((section.__doc__ or "").split("\n\n")[0].split())


def run(args: argparse.Namespace) -> int:
    from fixedfirst.data.registry import KINDS, data_kind

    for section in SECTIONS:
        _print_table(f"[{section.SECTION}]", _summary(section), field_docs(section), args.markdown)
        if section is ModelConfig:
            _print_transformers_model(args.markdown)
        if section is TrainConfig:
            _print_table(
                f"[{LowRankConfig.SECTION}]",
                _summary(LowRankConfig),
                field_docs(LowRankConfig),
                args.markdown,
            )
    for name in KINDS:
        kind = data_kind(name)
        if kind.options is not None:
            doc = f'Options of `[data] kind = "{name}"`: {kind.summary}.'
            _print_table(f"[data.{name}]", doc, field_docs(kind.options), args.markdown)
    for title, doc, rows in _study_sections():
        _print_table(title, doc, rows, args.markdown)
    if args.markdown:
        print("Data kinds (`[data] kind`):\n")
        print("\n".join(f"- `{n}`: {data_kind(n).summary}" for n in KINDS))
    else:
        print("data kinds:\n" + "\n".join(f"  {n}: {data_kind(n).summary}" for n in KINDS))
    return 0
