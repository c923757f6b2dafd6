"""Every number a page quotes is tied to the committed output of the command that made it.

The pages are README.md and every Markdown file under docs/ (the site). Two kinds of block:

- `<!-- quoted from PATH -->` ... `<!-- end quote -->`: every non-blank line between them must be a
  line of PATH, word for word and in PATH's order (code fences, lines starting with three
  backticks, are the page's own);
- `<!-- numbers from PATH [PATH ...] -->` ... `<!-- end numbers -->`: prose whose every decimal
  number (one with a point or an exponent) must be a number of one of the PATHs written to the
  same precision or rounded by one digit ("1.6%" for "+1.60%", "0.076" for "0.0756"); a JSON
  file's numbers, which carry every digit, may be rounded to any precision. Signs aside: "0.076
  nats above" may quote a difference of -0.0756.

PATH is relative to the repository root and names a committed file under docs/. When an
experiment is re-run and its output replaced, a page that was not updated fails here and the
message names the line.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
QUOTE = re.compile(r"^<!-- quoted from (\S+) -->$")
QUOTE_END = "<!-- end quote -->"
NUMBERS = re.compile(r"^<!-- numbers from ((?:\S+ ?)+) -->$")
NUMBERS_END = "<!-- end numbers -->"
NUMBER = re.compile(r"(?<![\w.])[+-]?\d[\d,]*(?:\.\d+)?(?:[eE][+-]?\d+)?")
_N = r"([+-]?\d[\d,]*\.\d+(?:[eE][+-]?\d+)?)%?"
INTERVAL = re.compile(_N + r"\s*(?:nats\s*|bits\s*|points\s*)?\[" + _N + r",\s*" + _N + r"\]")
"""An estimate and its interval, "+1.60% [+0.29%, +2.91%]" or "0.48 nats [0.12, 0.85]"."""


def site_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(text: str) -> list[tuple[str, tuple[str, ...], list[str]]]:
    """(kind, source paths, lines) of every quote and numbers block, in page order."""
    found, current, lines, in_fence = [], None, [], False
    for line in text.splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
        if in_fence and current is None:  # a page showing the markers, not using them
            continue
        start = QUOTE.match(line) or NUMBERS.match(line)
        if start:
            assert current is None, f"a block from {current[1]} is not closed"
            kind = "quote" if start.re is QUOTE else "numbers"
            current, lines = (kind, tuple(start.group(1).split())), []
        elif line in (QUOTE_END, NUMBERS_END):
            assert current is not None, f"{line} without a start"
            assert line == (QUOTE_END if current[0] == "quote" else NUMBERS_END), (
                f"a {current[0]} block from {current[1]} ends with {line}"
            )
            found.append((current[0], current[1], lines))
            current = None
        elif current is not None and line.strip() and not line.startswith("```"):
            lines.append(line)
    assert current is None, f"a block from {current[1]} is not closed"
    return found


def missing_quoted_line(lines: list[str], source: list[str]) -> str | None:
    """The first quoted line that is not in source after the previous one, else None."""
    at = 0
    for line in lines:
        try:
            at = source.index(line, at) + 1
        except ValueError:
            return line
    return None


def numbers(text: str) -> list[str]:
    return [m.group(0) for m in NUMBER.finditer(text)]


def decimal_numbers(text: str) -> list[str]:
    return [n for n in numbers(text) if "." in n or "e" in n.lower()]


def written(token: str) -> tuple[float, int]:
    """(absolute value, decimal places of the value as written): "+1.60" -> (1.6, 2),
    "6.7e-3" -> (0.0067, 4)."""
    token = token.lstrip("+-").replace(",", "")
    mantissa, _, exponent = token.lower().partition("e")
    return float(token), len(mantissa.partition(".")[2]) - int(exponent or 0)


Source = list[tuple[float, int | None]]
"""A source's numbers with their written decimal places (None: any, for a JSON file)."""


def unquoted_number(lines: list[str], sources: Source) -> str | None:
    """The first decimal number of the prose that no source number rounds to, else None."""
    for line in lines:
        for token in decimal_numbers(line):
            x, places = written(token)
            half = 0.5 * 10.0**-places * (1 + 1e-9)
            if not any(
                (p is None or p in (places, places + 1)) and abs(x - y) <= half for y, p in sources
            ):
                return f"{token} in: {line.strip()}"
    return None


def rounds_to(token: str, source: str, any_precision: bool = False) -> bool:
    """Whether source's number, written as it is, is the prose token's at its precision."""
    (x, places), (y, p) = written(token), written(source)
    close = abs(x - y) <= 0.5 * 10.0**-places * (1 + 1e-9)
    return close and (any_precision or p in (places, places + 1))


def unquoted_interval(lines: list[str], source_lines: list[str]) -> str | None:
    """The first estimate with its interval that no source line holds, else None: the estimate
    and then its two ends must come from one row of a table, not from three (the ends in either
    order: prose may state a difference the other way round, "4.1 [2.7, 5.5] above" for
    "-4.1 [-5.5, -2.7]")."""
    rows = [numbers(line) for line in source_lines]

    def in_order(tokens: tuple[str, ...], row: list[str]) -> bool:
        at = 0
        for token in tokens:
            at = next((i + 1 for i in range(at, len(row)) if rounds_to(token, row[i])), -1)
            if at < 0:
                return False
        return True

    for line in lines:
        for match in INTERVAL.finditer(line):
            estimate, low, high = match.groups()
            if not any(
                in_order((estimate, low, high), row) or in_order((estimate, high, low), row)
                for row in rows
            ):
                return f"{match.group(0)} in: {line.strip()}"
    return None


def source_numbers(paths: tuple[str, ...], page: Path) -> Source:
    values: Source = []
    for path in paths:
        source = ROOT / path
        assert source.is_file(), f"{page.name} takes numbers from {path}, which is not committed"
        for token in numbers(source.read_text()):
            x, places = written(token)
            if math.isfinite(x):
                values.append((x, None if source.suffix == ".json" else places))
    return values


def lines_of(path: str) -> list[str]:
    return (ROOT / path).read_text().splitlines()


def test_blocks_are_parsed():
    text = (
        "a\n<!-- quoted from x.md -->\n```\n| 1 |\n\n| 2 |\n```\n<!-- end quote -->\n"
        "<!-- numbers from y.md z.json -->\nNLL 1.5 and +2.0%\n<!-- end numbers -->\n"
        "```\n<!-- quoted from shown.md -->\n| 3 |\n<!-- end quote -->\n```\n"
    )
    assert blocks(text) == [
        ("quote", ("x.md",), ["| 1 |", "| 2 |"]),
        ("numbers", ("y.md", "z.json"), ["NLL 1.5 and +2.0%"]),
    ]


def test_a_quote_must_keep_its_sources_order():
    source = ["| a |", "| b |", "| c |"]
    assert missing_quoted_line(["| a |", "| c |"], source) is None
    assert missing_quoted_line(["| c |", "| a |"], source) == "| a |"


def test_prose_numbers_match_at_their_precision():
    text = [(0.0756, 4), (1.6, 2), (0.00672, 5), (13.6, 1), (3276800.0, 0)]
    assert unquoted_number(["0.076 nats, +1.60% [+1.6%], 6.7e-3, 3,276,800"], text) is None
    assert unquoted_number(["13.6% and 13.7%"], text) == "13.7 in: 13.6% and 13.7%"
    assert unquoted_number(["0.08"], text) == "0.08 in: 0.08"  # two digits off: not a quote
    assert unquoted_number(["0.08"], [(0.0756, None)]) is None  # a JSON number, any precision
    assert unquoted_number(["K = 16, 3 seeds"], text) is None  # integers are not checked


def test_an_interval_is_quoted_from_one_row():
    rows = ["| a | +1.60% [+0.29, +2.91] |", "| b | -0.0756 | [-0.1042, -0.0470] |", "| c | 0.30 |"]
    assert unquoted_interval(["+1.6% [+0.29%, +2.91%] and 0.076 nats [0.104, 0.047]"], rows) is None
    assert unquoted_interval(["0.076 nats [0.047, 0.104] above"], rows) is None  # turned round
    assert unquoted_interval(["+1.6% [+0.29%, +0.30]"], rows) is not None  # ends from two rows
    assert unquoted_interval(["+2.91% [+0.29%, +1.60%]"], rows) is not None  # estimate first


@pytest.mark.parametrize("page", site_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_quoted_line_and_number_is_in_its_committed_output(page):
    for kind, paths, lines in blocks(page.read_text()):
        assert lines, f"{page.name}: an empty {kind} block from {paths}"
        if kind == "quote":
            (path,) = paths
            source = ROOT / path
            assert path.startswith("docs/") and source.is_file(), (
                f"{page.name} quotes {path}, which is not a committed output under docs/"
            )
            missing = missing_quoted_line(lines, source.read_text().splitlines())
            assert missing is None, (
                f"{page.name}: line not in {path} (or out of its order; re-run, then update): "
                f"{missing}"
            )
        else:
            missing = unquoted_number(lines, source_numbers(paths, page))
            assert missing is None, f"{page.name}: number not in {', '.join(paths)}: {missing}"
            rows = [row for p in paths if not p.endswith(".json") for row in lines_of(p)]
            if rows:
                missing = unquoted_interval(lines, rows)
                assert missing is None, (
                    f"{page.name}: interval not in one line of {', '.join(paths)}: {missing}"
                )


def test_the_pages_quote_the_studies_outputs():
    """The quote check has something to check: the README and each study report quote outputs."""
    quoting = {p.name for p in site_pages() if blocks(p.read_text())}
    studies = {p.name for p in (ROOT / "docs" / "studies").glob("*.md")}
    assert "README.md" in quoting
    assert studies and studies <= quoting, f"study reports that quote nothing: {studies - quoting}"
