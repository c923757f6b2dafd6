"""`fixedfirst config-reference`: every configuration key, its default and what it means: the run
sections, each data kind's options, and the `[experiment]` section of the study presets."""

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


def _preset_sections() -> list[tuple[str, type]]:
    """(command, its preset's [experiment] dataclass) for the studies that read presets."""
    from fixedfirst.studies.bios.experiment import ExperimentConfig as BiosExperiment
    from fixedfirst.studies.chains.experiment import ExperimentConfig as ChainsExperiment

    return [("bios", BiosExperiment), ("chains", ChainsExperiment)]


def run(args: argparse.Namespace) -> int:
    from fixedfirst.data.registry import KINDS, data_kind

    for section in SECTIONS:
        rows = field_docs(section)
        doc = " ".join((section.__doc__ or "").split("\n\n")[0].split())
        _print_table(f"[{section.SECTION}]", doc, rows, args.markdown)
    for name in KINDS:
        kind = data_kind(name)
        if kind.options is not None:
            doc = f'Options of `[data] kind = "{name}"`: {kind.summary}.'
            _print_table(f"[data.{name}]", doc, field_docs(kind.options), args.markdown)
    for command, experiment in _preset_sections():
        doc = (
            f"A `fixedfirst {command}` preset's own section (`--preset FILE`, or "
            f"`--set experiment.KEY=VALUE`); its other sections are a run's, without [schedule]."
        )
        _print_table(f"[experiment] ({command})", doc, field_docs(experiment), args.markdown)
    if args.markdown:
        print("Data kinds (`[data] kind`):\n")
        print("\n".join(f"- `{n}`: {data_kind(n).summary}" for n in KINDS))
    else:
        print("data kinds:\n" + "\n".join(f"  {n}: {data_kind(n).summary}" for n in KINDS))
    return 0
