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
    """`value` as JSON: objects and arrays that hold others indented, one entry per line; those
    holding only numbers, strings, booleans or nulls on one line (a committed file a diff can
    read, smaller than `indent=2` makes it). Keys must be strings; floats keep every digit."""
    if isinstance(value, dict):
        if any(not isinstance(key, str) for key in value):
            raise TypeError(f"numbers_json: keys must be strings, got {list(value)}")
        entries = [f"{json.dumps(k)}: {numbers_json(v, depth + 1)}" for k, v in value.items()]
        children, brackets = list(value.values()), "{}"
    elif isinstance(value, list):
        entries = [numbers_json(v, depth + 1) for v in value]
        children, brackets = value, "[]"
    else:
        return json.dumps(value)
    if not any(isinstance(child, dict | list) for child in children):
        return json.dumps(value)
    inner = "\n" + "  " * (depth + 1)
    return brackets[0] + inner + ("," + inner).join(entries) + "\n" + "  " * depth + brackets[1]
