"""`fixedfirst config-reference`: every configuration key, its default and what it means."""

from __future__ import annotations

import argparse

from fixedfirst.config import SECTIONS, field_docs


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    for section in SECTIONS:
        rows = field_docs(section)
        if args.markdown:
            print(f"**[{section.SECTION}]** {section.__doc__}\n")
            print("| key | default | meaning |\n| --- | --- | --- |")
            for name, default, doc in rows:
                print(f"| `{name}` | `{default}` | {doc.replace('|', '/')} |")
            print()
        else:
            print(f"[{section.SECTION}]")
            for name, default, doc in rows:
                print(f"  {name} = {default}\n      {doc}")
            print()
    return 0
