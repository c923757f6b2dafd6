"""The inspection page: one self-contained HTML file (no network, no server) that draws the
record (`record.py`) in the browser: a heat map of every position at every serving depth, the
exit rules' stopping depths as lines over it, the predictions of any position on hover.

The record travels inside the page as JSON (`<script id="data" type="application/json">`), so a
reader can take the numbers back out (`read_page_record`); '<' is escaped in it, so no token text
can close the script element. The template (page.html) holds the styles and the drawing code.
"""

from __future__ import annotations

import html
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

from fixedfirst.errors import UserError
from fixedfirst.files.writing import figure_writer, write_together

GENERATOR = '<meta name="generator" content="fixedfirst inspect">'
"""In the head of every page: how a later --out recognises a page it may replace."""
_DATA = re.compile(r'<script id="data" type="application/json">(.*?)</script>', re.S)


def render_page(record: dict[str, Any]) -> str:
    template = resources.files("fixedfirst.inspection").joinpath("page.html").read_text("utf-8")
    data = json.dumps(record, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")
    title = html.escape(f"fixedfirst inspect: {record['about']['checkpoint']}")
    return template.replace("__TITLE__", title).replace("__DATA__", data)


def write_page(path: Path, record: dict[str, Any], picture: Path) -> None:
    """The page at `path` and its PNG (`figure.py`) at `picture`, both or neither: a disk with
    room for the page but not the picture leaves both files as they were."""
    from fixedfirst.inspection.figure import draw_inspection

    text = render_page(record)
    write_together(
        {
            path: lambda p: p.write_text(text, encoding="utf-8"),
            picture: figure_writer(draw_inspection(record), picture),
        }
    )


def is_our_page(path: Path) -> bool:
    """An HTML file written by `fixedfirst inspect` (its head names the generator)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return GENERATOR in f.read(4096)
    except OSError:
        return False


def read_page_record(path: Path) -> dict[str, Any]:
    """The record embedded in a page."""
    found = _DATA.search(Path(path).read_text(encoding="utf-8"))
    if found is None:
        raise UserError(f"{path}: not a page written by fixedfirst inspect")
    return json.loads(found.group(1))
