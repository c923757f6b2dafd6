"""`fixedfirst config-reference`: every configuration key, its default and what it means."""

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

    for section in SECTIONS:
        rows = field_docs(section)
        doc = " ".join((section.__doc__ or "").split("\n\n")[0].split())
        _print_table(f"[{section.SECTION}]", doc, rows, args.markdown)
    for name in KINDS:
        kind = data_kind(name)
        if kind.options is not None:
            doc = f'Options of `[data] kind = "{name}"`: {kind.summary}.'
            _print_table(f"[data.{name}]", doc, field_docs(kind.options), args.markdown)
    if args.markdown:
        print("Data kinds (`[data] kind`):\n")
        print("\n".join(f"- `{n}`: {data_kind(n).summary}" for n in KINDS))
    else:
        print("data kinds:\n" + "\n".join(f"  {n}: {data_kind(n).summary}" for n in KINDS))
    return 0
