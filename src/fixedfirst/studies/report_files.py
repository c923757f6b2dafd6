"""A study's report and the numbers it is made from: STEM.md written from STEM.json beside it.

Each study's command measures far more than its report reads (per-run logs, checkpoints, every
score of every set); STEM.json keeps only what the report is computed from, small enough to
commit beside the report (docs/development/reports.md). The report is rendered from that file
as read back from disk, so what the command writes is by construction what the committed file
remakes: the same study function, given STEM.json alone, in any directory, gives the same text.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fixedfirst.files.writing import write_text_atomic

Render = Callable[[dict[str, Any]], str]
"""A study's report from its numbers (a dict read from STEM.json)."""


def write_numbers_and_report(
    out: Path, numbers: dict[str, Any], render: Render, stem: str = "report"
) -> str:
    """Write OUT/STEM.json (`numbers`, keys in the order they were built, nothing rounded), then
    OUT/STEM.md rendered from that file as read back; return the report's text."""
    numbers_path = out / f"{stem}.json"
    write_text_atomic(numbers_path, numbers_json(numbers) + "\n")
    text = render(json.loads(numbers_path.read_text()))
    write_text_atomic(out / f"{stem}.md", text)
    return text


def numbers_json(value: Any, depth: int = 0) -> str:
    """`value` as JSON, objects and arrays that hold others indented one per line, those that
    hold only numbers, strings, booleans or nulls on one line (a committed file that a diff can
    read, at about a third of `indent=2`'s size). Keys must be strings; floats keep every digit."""
    nested = isinstance(value, dict | list) and any(
        isinstance(v, dict | list) for v in (value.values() if isinstance(value, dict) else value)
    )
    if not nested:
        if isinstance(value, dict) and any(not isinstance(k, str) for k in value):
            raise TypeError(f"numbers_json: keys must be strings, got {list(value)}")
        return json.dumps(value)
    pad, inner = "  " * depth, "  " * (depth + 1)
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise TypeError(f"numbers_json: keys must be strings, got {key!r}")
        items = [f"{inner}{json.dumps(k)}: {numbers_json(v, depth + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    items = [f"{inner}{numbers_json(v, depth + 1)}" for v in value]
    return "[\n" + ",\n".join(items) + f"\n{pad}]"
