"""Numbers in prose tied to the one value each comes from (docs/development/reports.md).

A block of prose whose numbers are tied:

    <!-- numbers tied to f=docs/figures/lm-factors-factors.md t=docs/figures/lm-factors-table.md -->
    K0 = 4 at 0.67 ends +1.61% [+1.16%, +2.07%]<!--@k4--> above uniform ...

    <!--@
    k4: f | K0=4, switch 0.67 vs uniform (equal tokens) & base | gap (a/b - 1) + 95% interval
    -->
    <!-- end tied numbers -->

The opening comment names each source file once, by a short alias. A tie, `<!--@NAME-->`, stands
right after the numbers it ties and ties the last as many numbers before it (since the previous
tie) as its source value has; a legend, `<!--@` on a line of its own and one `NAME: REFERENCE` (or
`NAME = EXPRESSION`) per line, says where each NAME comes from. Neither shows on the site or on
GitHub. A REFERENCE is one of

    ALIAS | ROW | COLUMN [+ COLUMN ...]    cells of a Markdown table: of the tables with these
                                           columns, the row whose cells include each of ROW's
                                           ` & `-joined texts, under each header (a
                                           repeated one: the next after the column before it in
                                           the list, or the n-th: `95% interval#2`)
    ALIAS | "TEXT" ["MORE" ...]            the one line of a file that contains TEXT (once): the
                                           numbers after it, or after the first MORE after it
    ALIAS | line "TEXT"                    every number of the one line that contains TEXT
    ALIAS | count "TEXT" ["MORE" ...]      how many lines contain TEXT (and each MORE)
    ALIAS /json/pointer                    a JSON value (RFC 6901): a number or a list of them

followed, optionally, by `[i]` or `[i-j]` (the i-th to j-th of its numbers, from 1) and ` %` (times
100, a JSON share as a percentage); `REF ; REF` joins references' values (a range from two
cells: "957-1,261 s"); `-ALIAS` negates the values, and swaps the ends of a bracketed
`[low, high]`, for prose that says "0.076 nats [0.047, 0.104] above" of -0.0756 [-0.1042, -0.0470].
An EXPRESSION computes from other names of the legend with + - * / and parentheses, e.g.
`drop = (u16 / u4 - 1) * 100`.

A written number matches its value at the precision it is written ("1.6" for 1.61, "+1.61" for a
JSON 0.016097 tied with `%`), never with more digits than the source shows; an integer must be the
value to the unit; a number written without a sign is compared with the value's magnitude. Every
other number of the block must be a setting rather than a measurement (`SETTINGS`: K = 4, K0 = 2,
switch 0.67, depths 8..64, 3 seeds, a 95% interval, a date), or the check fails on it.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

START = re.compile(r"^<!-- numbers tied to ((?:\w+=\S+ ?)+) -->$")
END = "<!-- end tied numbers -->"
UNTIED = re.compile(r"^<!-- not from a report: (\S.*) -->$")
UNTIED_END = "<!-- end not from a report -->"
ELSEWHERE = re.compile(r"^not from a report: (\S.*)$")
"""A legend line's reference for numbers that no committed output holds (a wall-clock from a
command's log, an earlier run's numbers kept in the log): `NAME: not from a report: WHY`. Its
tie marks the numbers of the sentence it ends, no earlier ones."""
SENTENCE_END = re.compile(r"(?<![\d.])[.!?](?=\s)")
SKIPPED = (
    (re.compile(r"^<!-- quoted from \S+ -->$"), "<!-- end quote -->"),
    (START, END),
    (UNTIED, UNTIED_END),
)
"""Blocks whose numbers a page check leaves to another: quotes (tests/test_doc_quotes.py), tied
prose (`check_block`) and prose marked as not from a report."""
TIE = re.compile(r"<!--@([\w.-]+)-->")
LEGEND = re.compile(r"<!--@\n(.*?)-->", re.S)
COMMENT = re.compile(r"<!--.*?-->", re.S)
NUMBER = re.compile(r"(?<![\w.])[+-]?\d(?:[\d,]*\d)?(?:\.\d+)?(?:[eE][+-]?\d+)?")
"""A number as a report writes it: digits (a source's numbers are only these)."""
CARDINALS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty"
)
WORDS = {
    **{word: value for value, word in enumerate(CARDINALS.split(" "))},
    **{"thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80},
    "ninety": 90,
}
"""Numbers written as words: "in four of five seeds" says a count as surely as "4 of 5" does."""
WORD = "|".join(word for word in WORDS if word not in ("zero", "one"))
"""The words read as numbers in prose: not "zero", nearly always the reference a difference is
tested against ("cannot be told from zero"), nor "one", nearly always an article or a pronoun
("one held-out set", "the one whose seeds spread most")."""
PROSE_NUMBER = re.compile(NUMBER.pattern + r"|(?<![\w-])(?:" + WORD + r")\b(?!-\w)", re.IGNORECASE)
"""A number of prose: digits, or a word ("four"; a compound such as "one-layer" is a setting)."""
COUNTED = (
    r"arms?|levels?|factors?|workers?|cores?|people|blocks|rows|claims?|comparisons|"
    r"schedules|processes|threads?|layers?|templates|attributes|experts|passes|tasks|sets|runs|"
    r"rates|bands|depths|trainings|recalls|checkpoints|gaps|GPUs|H100s|ranks|rules|prompts|"
    r"thresholds|sequences|rounds|repeats"
)
SELECTION = re.compile(r"\s*\[(\d+)(?:-(\d+))?\]$")
SETTINGS = re.compile(
    r"|".join(
        (
            r"\b(?:switch(?:es|ing)?(?:\s+at)?|K0\s?=\s?\d+,?\s+at)\s+0\.\d+\b",  # a switch
            r"\b(?:K0|K|k|u|d|S|L)\s?=\s?\d+\b(?!\.\d)",  # serving depth, K0, updates, width
            r"\bdepths?[-\s]\d+\b(?!\.\d)",  # a serving depth
            r"\b\d+\.\.\w+\b",  # a range of depths, seeds or difficulties (1..k_max)
            r"\b\d+x\b",  # a multiple of a depth
            r"\b[a-z]+-\d+[a-z]+\b",  # a preset's name: lm-200m, lm-1b
            r"\b\d+\.\d+\.\d+(?:\+\w+)?",  # a release: torch 2.11.0+cu130
            r"\b\d+%(?=\s+(?:[\w-]+\s+)?finish)",  # a finishing arm: a 10% constant-rate finish
            r"\b\d+-(?=[a-z])",  # a compound: a 5-seed run, a 2-core machine
            rf"(?i:\b(?:\d+|{WORD})\s+times\s+the\b)",  # a multiple of a setting
            r"\b\d+[MBk]\b",  # a model's or a vocabulary's size
            rf"(?i:\b(?:\d[\d,]*|{WORD})(?:\s+(?:primary|more|other|named|held-out|evaluation|validation|exit))?\s+(?:{COUNTED})\b)",
            r"\b\d[\d,]*(?:\s+fresh)?\s+seeds?\b",  # a count of seeds, in digits: "in four
            # seeds" is a measurement
            r"\b[Ss]eeds?\s+\d+(?:(?:,\s+|\s+and\s+)\d+)*\b(?!\.\d)",
            r"(?m:^\s*\d+\.(?=\s))",  # a numbered list's item
            r"\b(?:primary\s+)?claims?\s+\d\b",
            r"\b\d+%\s+(?:interval|t-interval|bands?|confidence)",
            r"\b\d+%\s+of\s+(?:the|its)\s+(?:original\s+)?(?:FLOP\s+budget|budget|steps|tokens)\b",
            r"\b\d{4}-\d{2}-\d{2}\b",  # a date
            r"\b\d{1,2}:\d{2}\b",  # a time of day
            r"\bthreshold\s+\d[\d.e-]*",  # an exit rule's setting
            r"\b\d+\s+degrees?\s+of\s+freedom\b",
            r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b",  # a commit
            r"§\d+",
            r"\b(?:Figure|Table|issue|step)\s+\d+\b",
            r"\b\d+/\d+\b",  # a fraction of the tokens
            r"`[^`]*`",  # code
            r"[\w.-]+\.(?:md|txt|json|png|toml|py)\b",  # a file's name
            r"\]\([^)]*\)",  # a link's address
        )
    )
)
"""Numbers that name a setting, not a measurement: never tied, never checked. A count of seeds is
a setting in digits ("3 seeds") and a measurement in words ("in four seeds")."""


@dataclass(frozen=True)
class Value:
    number: float
    places: int | None
    """Decimal places as the source writes it; None for a JSON number or a computed one (exact)."""


def written(token: str) -> tuple[float, int]:
    """(value, decimal places as written): "+1.60" -> (1.6, 2), "6.7e-3" -> (0.0067, 4),
    "four" -> (4.0, 0)."""
    if token.lower() in WORDS:
        return float(WORDS[token.lower()]), 0
    token = token.replace(",", "")
    mantissa, _, exponent = token.lower().partition("e")
    return float(token), len(mantissa.partition(".")[2]) - int(exponent or 0)


def numbers_with_brackets(text: str) -> tuple[list[Value], list[tuple[int, int]]]:
    """The numbers of a source text as written, and the index pairs of each `[low, high]`."""
    values, pairs = [], []
    for match in NUMBER.finditer(text):
        values.append(Value(*written(match.group(0))))
    for bracket in re.finditer(r"\[([^\[\]]*)\]", text):
        inside = [m for m in NUMBER.finditer(bracket.group(1))]
        if len(inside) == 2:
            before = len(NUMBER.findall(text[: bracket.start(1)]))
            pairs.append((before, before + 1))
    return values, pairs


@dataclass(frozen=True)
class Source:
    """A reference resolved: its values, and which of them are the ends of a bracket."""

    values: list[Value]
    pairs: list[tuple[int, int]]
    elsewhere: str | None = None
    """Why the numbers tied here come from no committed output (`not from a report: WHY`): the
    tie then marks the numbers of its sentence before it, instead of checking them."""

    def selected(self, first: int, last: int) -> Source:
        keep = range(first - 1, last)
        if not 1 <= first <= last <= len(self.values):
            raise ValueError(f"[{first}-{last}] of {len(self.values)} numbers")
        index = {old: new for new, old in enumerate(keep)}
        pairs = [(index[a], index[b]) for a, b in self.pairs if a in index and b in index]
        return Source([self.values[i] for i in keep], pairs)

    def negated(self) -> Source:
        values = [Value(-v.number, v.places) for v in self.values]
        for a, b in self.pairs:
            values[a], values[b] = values[b], values[a]
        return Source(values, self.pairs)

    def scaled(self, factor: float) -> Source:
        return Source([Value(v.number * factor, None) for v in self.values], self.pairs)


def table_cells(lines: list[str], row: list[str], columns: list[str]) -> str:
    """The text of the named columns' cells in the one row, of the tables that have those
    columns, whose cells include `row`."""
    header: list[str] = []
    found = []
    for i, line in enumerate(lines):
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        below = lines[i + 1] if i + 1 < len(lines) else ""
        if re.fullmatch(r"\|[\s:|-]+\|", below.strip()):
            header = cells
            continue
        plain = [c.replace("**", "") for c in cells]
        named = all(c.partition("#")[0] in header for c in columns)  # a table with the columns
        if named and all(r in cells or r in plain for r in row):
            found.append((header, cells))
    if len(found) != 1:
        raise ValueError(f"{len(found)} rows have the cells {row}")
    header, cells = found[0]
    texts, previous = [], -1
    for k, column in enumerate(columns):
        name, _, nth = column.partition("#")
        where = [i for i, h in enumerate(header) if h == name]
        if nth:
            where = where[int(nth) - 1 : int(nth)]
        elif k > 0:  # the next column so named after the one before it
            where = [i for i in where if i > previous][:1]
        if len(where) != 1:
            raise ValueError(f"column {column!r} is not one of {header}")
        previous = where[0]
        texts.append(cells[previous])
    return " ".join(texts)


def resolve(reference: str, files: dict[str, Path]) -> Source:
    """A legend's REFERENCE (not an expression) as the values it names."""
    parts = re.split(r'\s;\s(?=(?:[^"]*"[^"]*")*[^"]*$)', reference.strip())
    if len(parts) > 1:  # several references, their values one after the other
        sources = [resolve(part, files) for part in parts]
        values = [v for source in sources for v in source.values]
        offsets = [sum(len(x.values) for x in sources[:i]) for i in range(len(sources))]
        pairs = [
            (a + o, b + o)
            for source, o in zip(sources, offsets, strict=True)
            for a, b in source.pairs
        ]
        return Source(values, pairs)
    text = reference.strip()
    factor = 1.0
    if text.endswith(" %"):
        text, factor = text[:-2].rstrip(), 100.0
    chosen = SELECTION.search(text)
    if chosen:
        text = text[: chosen.start()]
    negate = text.startswith("-")
    alias, _, rest = text.lstrip("-").partition(" ")
    if alias not in files:
        raise ValueError(f"no source named {alias!r} in this block: {sorted(files)}")
    path = files[alias]
    rest = rest.strip()
    body = rest[1:].strip()
    if rest.startswith("/"):
        value = json.loads(path.read_text())
        for key in rest[1:].split("/"):
            key = key.replace("~1", "/").replace("~0", "~")
            value = value[int(key)] if isinstance(value, list) else value[key]
        listed = value if isinstance(value, list) else [value]
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in listed):
            raise ValueError(f"{rest} in {path.name} is not a number or a list of numbers")
        source = Source([Value(float(v), None) for v in listed], [])
    elif rest.startswith("|") and body.startswith("count ") and body.count('"') >= 2:
        anchors = re.findall(r'"([^"]+)"', body)
        lines = path.read_text().splitlines()
        counted = sum(all(anchor in line for anchor in anchors) for line in lines)
        source = Source([Value(float(counted), 0)], [])
    elif rest.startswith("|") and body.startswith("line ") and body.count('"') == 2:
        anchor = re.findall(r'"([^"]+)"', body)[0]
        lines = [line for line in path.read_text().splitlines() if anchor in line]
        if len(lines) != 1:
            raise ValueError(f'"{anchor}" must be in one line of {path.name}, not {len(lines)}')
        source = Source(*numbers_with_brackets(lines[0]))
    elif rest.startswith("|") and body.startswith('"') and body.count('"') >= 2:
        anchors = re.findall(r'"([^"]+)"', body)
        lines = [line for line in path.read_text().splitlines() if anchors[0] in line]
        if len(lines) != 1:
            raise ValueError(f'"{anchors[0]}" must be in one line of {path.name}, not {len(lines)}')
        tail = lines[0]
        for k, anchor in enumerate(anchors):
            if anchor not in tail or (k == 0 and tail.count(anchor) != 1):
                raise ValueError(f'"{anchor}" is {tail.count(anchor)} times where it is looked for')
            tail = tail.split(anchor, 1)[1]
        source = Source(*numbers_with_brackets(tail))
    elif rest.startswith("|") and " | " in body:
        row, columns = body.split(" | ", 1)
        cells = table_cells(path.read_text().splitlines(), row.split(" & "), columns.split(" + "))
        source = Source(*numbers_with_brackets(cells))
    else:
        raise ValueError(
            'neither | ROW | COLUMN, | "TEXT", | line "TEXT", | count "TEXT" nor /json/pointer'
        )
    if chosen:
        first = int(chosen.group(1))
        source = source.selected(first, int(chosen.group(2) or first))
    if negate:
        source = source.negated()
    return source.scaled(factor) if factor != 1.0 else source


OPERATORS: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def evaluate(expression: str, names: dict[str, Source]) -> float:
    """An EXPRESSION of other legend names (single values), numbers and + - * / ( )."""

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
            return OPERATORS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.Name):
            source = names.get(node.id)
            if source is None or len(source.values) != 1:
                raise ValueError(f"{node.id!r} is not an earlier name with one value")
            return source.values[0].number
        raise ValueError(f"{ast.dump(node)} is not + - * / of names and numbers")

    return walk(ast.parse(expression.strip(), mode="eval").body)


def legend(text: str, files: dict[str, Path]) -> tuple[dict[str, Source], set[str]]:
    """Every NAME of the block's legends, resolved in the order written, and the names the
    expressions read."""
    names: dict[str, Source] = {}
    read: set[str] = set()
    for block in LEGEND.finditer(text):
        for line in filter(str.strip, block.group(1).splitlines()):
            match = re.match(r"\s*([\w.-]+)\s*([:=])(.*)$", line)
            if not match:
                raise ValueError(f"legend line {line.strip()!r} is not NAME: REF or NAME = EXPR")
            name, kind, body = match.groups()
            if name in names:
                raise ValueError(f"@{name} is defined twice")
            try:
                marked = ELSEWHERE.match(body.strip())
                if kind == ":" and marked:
                    names[name] = Source([], [], marked.group(1))
                elif kind == ":":
                    names[name] = resolve(body, files)
                else:
                    names[name] = Source([Value(evaluate(body, names), None)], [])
                    tree = ast.parse(body.strip(), mode="eval")
                    read |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
            except (ValueError, KeyError, IndexError, SyntaxError) as e:
                raise ValueError(f"@{name}: {body.strip()}: {e}") from None
    return names, read


def matches(token: str, value: Value) -> bool:
    """Whether the prose's `token` is `value` at the precision written (and not more precise
    than the source writes it), sign included: a token written without one is positive, so
    prose that says a negative value the other way round ("0.076 nats above") ties `-ALIAS`."""
    x, places = written(token.lstrip("+"))
    if value.places is not None and places > value.places:
        return False
    return abs(x - value.number) <= 0.5 * 10.0**-places * (1 + 1e-9)


@dataclass(frozen=True)
class Block:
    files: dict[str, Path]
    text: str
    line: int
    """The line of the page the block starts on."""


def tied_blocks(page: str, root: Path) -> list[Block]:
    """Every tied block of a page (a code fence showing the markers is the page's own)."""
    found, current, in_fence = [], None, False
    lines = page.splitlines()
    for number, line in enumerate(lines, 1):
        if line.startswith("```"):
            in_fence = not in_fence
        if in_fence and current is None:
            continue
        start = START.match(line)
        if start:
            if current is not None:
                raise ValueError(f"line {number}: a tied block opens inside another")
            files = dict(part.split("=", 1) for part in start.group(1).split())
            current = (number, {alias: root / path for alias, path in files.items()}, [])
        elif line == END:
            if current is None:
                raise ValueError(f"line {number}: {END} without a start")
            found.append(Block(current[1], "\n".join(current[2]), current[0]))
            current = None
        elif current is not None:
            current[2].append(line)
    if current is not None:
        raise ValueError(f"line {current[0]}: a tied block is not closed")
    return found


def prose_numbers(prose: str) -> list[tuple[int, str]]:
    """(offset, token) of every number of the prose that is not a setting. Comments are blanked
    to a word character at their end, so the dash of "957<!--@a-->-1,261" is a range's."""
    prose = COMMENT.sub(lambda m: " " * (len(m.group(0)) - 1) + "_", prose)
    settings = [m.span() for m in SETTINGS.finditer(prose)]
    return [
        (m.start(), m.group(0))
        for m in PROSE_NUMBER.finditer(prose)
        if not any(a <= m.start() < b for a, b in settings)
    ]


def check_block(block: Block) -> list[str]:
    """What is wrong with a tied block: each untied number, each tie that does not match its
    source, each unknown or unused name; empty when every number is its value."""
    for alias, path in block.files.items():
        if not path.is_file():
            return [f"source {alias}={path} is not a committed file"]
    try:
        names, read = legend(block.text, block.files)
    except ValueError as e:
        return [str(e)]
    text = LEGEND.sub(lambda m: "\n" * m.group(0).count("\n"), block.text)

    def line(offset: int) -> int:
        return block.line + text.count("\n", 0, offset) + 1

    problems, used, start = [], set(), 0
    untied: list[tuple[int, str]] = []
    for tie in TIE.finditer(text):
        blanked = text[: tie.start()]
        pending = [(at, token) for at, token in prose_numbers(blanked) if at >= start]
        name, start = tie.group(1), tie.end()
        used.add(name)
        source = names.get(name)
        if source is None:
            problems.append(f"line {line(tie.start())}: <!--@{name}--> has no legend line")
            untied += pending
            continue
        if source.elsewhere is not None:
            ends = [m.end() for m in SENTENCE_END.finditer(text, 0, tie.start())]
            sentence = max([*ends, 0])
            untied += [(at, token) for at, token in pending if at < sentence]
            if not any(at >= sentence for at, _ in pending):
                problems.append(f"line {line(tie.start())}: @{name} marks no number")
            continue
        n = len(source.values)
        if len(pending) < n:
            problems.append(
                f"line {line(tie.start())}: @{name} ties {n} numbers, the prose before it has "
                f"{len(pending)}"
            )
            continue
        untied += pending[:-n]
        for (at, token), value in zip(pending[-n:], source.values, strict=True):
            if not matches(token, value):
                shown = f"{value.number:.{value.places}f}" if value.places else f"{value.number:g}"
                sign = token[0] not in "+-" and matches(token, Value(-value.number, value.places))
                why = " (written without its sign: write it, or tie -ALIAS)" if sign else ""
                problems.append(
                    f"line {line(at)}: {token} is tied to @{name}, which is {shown}{why}"
                )
    untied += [(at, token) for at, token in prose_numbers(text) if at >= start]
    problems += [f"line {line(at)}: {token} is not tied (nor a setting)" for at, token in untied]
    unused = names.keys() - used - read
    problems += [f"@{name} is in the legend but tied to nothing" for name in sorted(unused)]
    return problems


def unmarked_numbers(page: str) -> list[str]:
    """Every number of a page that is neither in a quote, in tied prose, in prose marked as not
    from a report, in code, nor a setting: "line N: TOKEN ..." for each."""
    problems, segment, first, closing, in_fence = [], [], 0, None, False

    def flush() -> None:
        text = "\n".join(segment)
        for at, token in prose_numbers(text):
            problems.append(
                f"line {first + text.count(chr(10), 0, at)}: {token} is neither tied nor marked "
                "as not from a report (nor a setting)"
            )
        segment.clear()

    for number, line in enumerate(page.splitlines(), 1):
        if line.startswith("```"):
            in_fence = not in_fence
            line = ""
        if closing is not None:
            closing = None if line == closing else closing
            continue
        if in_fence:
            flush()
            continue
        closing = next((end for start, end in SKIPPED if start.match(line)), None)
        if closing is not None:
            flush()
            continue
        if not segment:
            first = number
        segment.append(line)
    flush()
    return problems
