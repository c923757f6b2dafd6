"""Every number a page quotes is tied to the committed output of the command that made it.

The pages are README.md and every Markdown file under docs/ (the site). Two kinds of block:

- `<!-- quoted from PATH -->` ... `<!-- end quote -->`: every non-blank line between them must be a
  line of PATH, word for word and in PATH's order (code fences, lines starting with three
  backticks, are the page's own);
- `<!-- numbers from PATH [PATH ...] -->` ... `<!-- end numbers -->`: prose whose every decimal
  number (one with a point or an exponent) must be, at the precision the prose writes it, a number
  of one of the PATHs (signs aside: "0.076 nats above" may quote a difference of -0.0756).

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


def value(token: str) -> float:
    return abs(float(token.replace(",", "")))


def resolution(token: str) -> float:
    """Half a unit of the last digit the token writes: 1.60 -> 0.005, 6.7e-3 -> 5e-5."""
    mantissa, _, exponent = token.lower().replace(",", "").partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 0.5 * 10 ** (int(exponent or 0) - decimals)


def unquoted_number(lines: list[str], sources: list[float]) -> str | None:
    """The first decimal number of the prose that no source number rounds to, else None."""
    for line in lines:
        for token in decimal_numbers(line):
            x, half = value(token), resolution(token)
            if not any(abs(x - y) <= half * (1 + 1e-9) for y in sources):
                return f"{token} in: {line.strip()}"
    return None


def source_numbers(paths: tuple[str, ...], page: Path) -> list[float]:
    values = []
    for path in paths:
        source = ROOT / path
        assert source.is_file(), f"{page.name} takes numbers from {path}, which is not committed"
        values += [value(n) for n in numbers(source.read_text())]
    return [v for v in values if math.isfinite(v)]


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
    sources = [0.0756, 1.6036, 0.00672, 13.6, 3276800.0]
    assert unquoted_number(["0.076 nats, +1.60% [+1.6%], 6.7e-3, 3,276,800"], sources) is None
    assert unquoted_number(["13.6% and 13.7%"], sources) == "13.7 in: 13.6% and 13.7%"
    assert unquoted_number(["1.605"], sources) == "1.605 in: 1.605"  # 1.6036 is 1.604
    assert unquoted_number(["K = 16, 3 seeds"], sources) is None  # integers are not checked


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


def test_the_pages_quote_the_studies_outputs():
    """The quote check has something to check: the README and each study report quote outputs."""
    quoting = {p.name for p in site_pages() if blocks(p.read_text())}
    studies = {p.name for p in (ROOT / "docs" / "studies").glob("*.md")}
    assert "README.md" in quoting
    assert studies and studies <= quoting, f"study reports that quote nothing: {studies - quoting}"
