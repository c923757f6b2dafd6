"""README and docs/ numbers are quoted from the committed outputs of the commands that made them.

A quoted block in README.md starts with a line `<!-- quoted from PATH -->` and ends with
`<!-- end quote -->`; every non-blank line between them must appear, word for word, as a line of
PATH (a report, table or claims file a command wrote and that is committed under docs/); code
fences (lines starting with three backticks) are the README's own. When an
experiment is re-run and its committed output replaced, a README table that was not updated fails
here.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START = re.compile(r"^<!-- quoted from (\S+) -->$")
END = "<!-- end quote -->"


def quoted_blocks(text: str) -> list[tuple[str, list[str]]]:
    blocks, current, lines = [], None, []
    for line in text.splitlines():
        match = START.match(line)
        if match:
            assert current is None, f"a quote from {current} is not closed"
            current, lines = match.group(1), []
        elif line == END:
            assert current is not None, "an end of quote without a start"
            blocks.append((current, lines))
            current = None
        elif current is not None and line.strip() and not line.startswith("```"):
            lines.append(line)
    assert current is None, f"a quote from {current} is not closed"
    return blocks


def test_quoted_blocks_are_parsed_and_checked():
    text = "a\n<!-- quoted from x.md -->\n```\n| 1 |\n\n| 2 |\n```\n<!-- end quote -->\nb\n"
    assert quoted_blocks(text) == [("x.md", ["| 1 |", "| 2 |"])]


def test_every_quoted_line_is_in_its_committed_output():
    blocks = quoted_blocks((ROOT / "README.md").read_text())
    assert len(blocks) >= 5, "the README quotes its experiments' committed outputs"
    for path, lines in blocks:
        source = ROOT / path
        assert source.is_file(), f"README quotes {path}, which is not committed"
        available = set(source.read_text().splitlines())
        assert lines, f"an empty quote from {path}"
        for line in lines:
            assert line in available, f"README line not in {path} (re-run, then update): {line}"


def test_every_quoted_line_in_the_docs_pages_is_in_its_committed_output():
    """The same rule for the pages under docs/ (the guides quote benchmark outputs)."""
    pages = sorted((ROOT / "docs").rglob("*.md"))
    quoted = [(page, block) for page in pages for block in quoted_blocks(page.read_text())]
    assert quoted, "the guides quote their measurements' committed outputs"
    for page, (path, lines) in quoted:
        source = ROOT / path
        assert source.is_file(), f"{page.name} quotes {path}, which is not committed"
        available = set(source.read_text().splitlines())
        assert lines, f"an empty quote from {path} in {page.name}"
        for line in lines:
            assert line in available, f"{page.name} line not in {path} (re-run, update): {line}"
