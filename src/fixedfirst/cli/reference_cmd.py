"""`fixedfirst config-reference`: every key of every file the project reads (run configurations,
sweep and study files, presets), its default and what it means, from the dataclasses' docstrings."""

from __future__ import annotations

import argparse

from fixedfirst.config import SECTIONS, field_docs


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


def run(args: argparse.Namespace) -> int:
    from fixedfirst.data.registry import KINDS, data_kind
    from fixedfirst.studies.bios.experiment import ExperimentConfig as BiosExperiment
    from fixedfirst.studies.chains.experiment import ExperimentConfig as ChainsExperiment
    from fixedfirst.studies.sweep.claims import ClaimSpec
    from fixedfirst.studies.sweep.factors import FactorSpec, GapSpec
    from fixedfirst.studies.sweep.settings import SweepSettings

    md = args.markdown
    if md:
        print("### Run configuration (`fixedfirst train CONFIG`, a sweep's `[base.*]`)\n")
    for section in SECTIONS:
        _print_table(f"[{section.SECTION}]", _summary(section), field_docs(section), md)
    for name in KINDS:
        kind = data_kind(name)
        if kind.options is not None:
            doc = f'Options of `[data] kind = "{name}"`: {kind.summary}.'
            _print_table(f"[data.{name}]", doc, field_docs(kind.options), md)
    if md:
        print("Data kinds (`[data] kind`):\n")
        print("\n".join(f"- `{n}`: {data_kind(n).summary}" for n in KINDS) + "\n")
    else:
        print("data kinds:\n" + "\n".join(f"  {n}: {data_kind(n).summary}" for n in KINDS) + "\n")
    if md:
        print(
            "### Sweep and study files (`fixedfirst sweep FILE`)\n\n"
            "`base` (a run configuration file) or `[base.SECTION]` tables, then the tables below; "
            'each `[[runs]]` entry has a `name`, optionally `flops_of = "ENTRY"` (its FLOP budget '
            "is that entry's modeled FLOPs) and `section.key = value` lines applied on top of the "
            "base, exactly like `--set`.\n"
        )
    for table, cls in (("[sweep]", SweepSettings), ("[[claims]]", ClaimSpec)):
        _print_table(table, _summary(cls), field_docs(cls), md)
    for table, cls in (("[[gaps]]", GapSpec), ("[[factors]]", FactorSpec)):
        _print_table(table, _summary(cls), field_docs(cls), md)
    if md:
        print("### Presets (`fixedfirst bios --preset FILE`, `fixedfirst chains --preset FILE`)\n")
        print(
            "A preset holds the run sections every arm shares (no `[schedule]`: the study trains "
            "each of its schedules) and an `[experiment]` table.\n"
        )
    for study, cls in (("bios", BiosExperiment), ("chains", ChainsExperiment)):
        _print_table(f"[experiment] of a {study} preset", _summary(cls), field_docs(cls), md)
    return 0


def _summary(cls: type) -> str:
    return " ".join((cls.__doc__ or "").split("\n\n")[0].split())
