"""Every number in README.md, the study pages and the guides that quote a study is the value it
names, or says it comes from no report.

The convention is tests/tied_numbers.py's (and docs/development/reports.md): a block of prose
opens with the files its numbers come from, each number (or number with its interval) is
followed by a tie `<!--@NAME-->`, and a legend says which table cell, line or JSON value NAME is.
A number edited by hand (digits, a word such as "four", or a sign) no longer matches its value; a
number added without a tie is neither tied nor a setting; both fail here, naming the page and the
line. On those pages a number outside every tied block fails too, unless it is quoted, in code,
a setting, or in prose marked `<!-- not from a report: WHY -->`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.test_committed_reports import COMMITTED, FIGURES
from tests.test_doc_quotes import blocks, site_pages
from tests.tied_numbers import Block, check_block, prose_numbers, tied_blocks, unmarked_numbers

ROOT = Path(__file__).resolve().parents[1]
STUDY_OUTPUTS = {
    *(f"docs/figures/{report}" for study in COMMITTED for report in study.reports),
    *(str(path.relative_to(ROOT)) for path in FIGURES.glob("first-run-*/first-run.md")),
}
"""What a study's command wrote (COMMITTED's reports) and the first GPU run's outputs."""


def quotes_a_study(page: Path) -> bool:
    """Whether a page quotes or ties numbers of a study's output."""
    text = page.read_text()
    sources = {path for _, paths, _ in blocks(text) for path in paths}
    sources |= {
        str(path.relative_to(ROOT)) for b in tied_blocks(text, ROOT) for path in b.files.values()
    }
    return bool(sources & STUDY_OUTPUTS)


TIED_PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs" / "studies").glob("*.md")),
    *filter(quotes_a_study, sorted((ROOT / "docs" / "guides").glob("*.md"))),
]
"""Pages whose every number is tied, quoted, a setting or marked as not from a report: no block
of loose `numbers from` quotes left. The README is held so whole: its results, the worked
example's report, and the rest (commands, the package) marked as not from a report."""


TABLE = """| arm | gap (a/b - 1) | 95% interval | change | 95% interval |
| --- | --- | --- | --- | --- |
| K0=4 | +1.61% | [+1.16%, +2.07%] | -2.44% | [-3.31%, -1.58%] |
| **K0=2** (reference) | +7.83% | [+5.52%, +10.13%] | – | – |
"""
REPORT = "- uniform at the full budget: 2.1% [0.6, 3.6] of the ceiling; claimed below 10%.\n"
NUMBERS = {"claims": [{"mean": -0.0756, "low": -0.1042, "high": -0.0470}], "steps": [715, 363]}


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    paths = {"t": tmp_path / "t.md", "r": tmp_path / "r.md", "j": tmp_path / "j.json"}
    paths["t"].write_text(TABLE)
    paths["r"].write_text(REPORT)
    paths["j"].write_text(json.dumps(NUMBERS))
    return paths


def check(files: dict[str, Path], prose: str, legend: str) -> list[str]:
    return check_block(Block(files, f"{prose}\n\n<!--@\n{legend}\n-->", 0))


def test_a_tie_takes_the_cells_the_row_and_columns_name(files):
    legend = "k4: t | K0=4 | gap (a/b - 1) + 95% interval\nch: t | K0=4 | change + 95% interval"
    prose = "K0 = 4 trails by +1.61% [+1.16%, +2.07%]<!--@k4-->, moved by -2.44% [-3.31, -1.58]"
    assert check(files, prose + "<!--@ch-->.", legend) == []
    second = "ch: t | K0=4 | 95% interval#2"
    assert check(files, "It moved within [-3.31, -1.58]<!--@ch-->", second) == []
    # Rounded to fewer digits is the same number; a hand edit is not.
    assert check(files, "+1.6% [+1.2%, +2.1%]<!--@k4-->", legend.split("\n")[0]) == []
    assert check(files, "+1.62% [+1.16%, +2.07%]<!--@k4-->", legend.split("\n")[0]) == [
        "line 1: +1.62 is tied to @k4, which is 1.61"
    ]
    # More digits than the source writes is not a quote of it.
    assert check(files, "+1.610% [+1.16%, +2.07%]<!--@k4-->", legend.split("\n")[0]) != []
    # A row is found by its cells with the emphasis taken off; a selection picks numbers.
    assert check(files, "K0 = 2: 7.8%<!--@k2-->", "k2: t | K0=2 (reference) | gap (a/b - 1)") == []
    high = "hi: t | K0=2 (reference) | 95% interval#1 [2]"
    assert check(files, "up to 10.13%<!--@hi-->", high) == []


def test_a_line_a_json_value_a_negation_and_an_expression(files):
    legend = "\n".join(
        (
            'u: r | "uniform at" "budget:" [1-3]',
            "m: -j /claims/0/mean %",
            "diff: -j /claims/0/mean",
            "steps: j /steps",
            "steps_fixed: j /steps/0",
            "steps_uniform: j /steps/1",
            "ratio = steps_fixed / steps_uniform",
        )
    )
    prose = (
        "Uniform averages 2.1% [0.6, 3.6]<!--@u--> of the ceiling; K0 = 4 is 7.56%<!--@m--> and "
        "0.076 nats<!--@diff--> below, after 715 and 363 steps<!--@steps--> "
        "(715<!--@steps_fixed--> against 363<!--@steps_uniform-->), 1.97<!--@ratio--> times as "
        "many."
    )
    assert check(files, prose, legend) == []
    assert check(files, prose.replace("715 and", "716 and"), legend) == [
        "line 1: 716 is tied to @steps, which is 715"
    ]  # integers are numbers too
    # Signed prose is held to the sign: +0.076 is not -0.0756.
    assert check(files, "+0.076<!--@d-->", "d: j /claims/0/mean") != []
    assert check(files, "-0.076<!--@d-->", "d: j /claims/0/mean") == []
    # An expression reads the names above it: the legend is read in order.
    later = (
        "ratio = steps_fixed / steps_uniform",
        "steps_fixed: j /steps/0",
        "steps_uniform: j /steps/1",
    )
    (problem,) = check(files, "1.97<!--@ratio-->", "\n".join(later))
    assert "is not an earlier name" in problem


def test_negating_a_bracketed_interval_swaps_its_ends(tmp_path):
    path = tmp_path / "c.md"
    path.write_text(
        "| claim | mean | 95% interval |\n| --- | --- | --- |\n"
        "| a | -0.0756 | [-0.1042, -0.0470] |\n"
    )
    legend = "x: -c | a | mean + 95% interval"
    assert check({"c": path}, "0.076 nats [0.047, 0.104]<!--@x--> above", legend) == []
    assert check({"c": path}, "0.076 nats [0.104, 0.047]<!--@x--> above", legend) != []


def test_every_number_of_a_block_is_tied_or_a_setting(files):
    legend = "k4: t | K0=4 | gap (a/b - 1)"
    settings = (
        "At K = 4 and K0 = 2, switch 0.67, depths 8..64, 3 seeds, seed 0, a 95% interval, on "
        "2026-12-04 (§5, Figure 1), `--jobs 2`, [a link](../figures/x-2.md) and 1/16 of the "
        "tokens: +1.61%<!--@k4-->."
    )
    assert check(files, settings, legend) == []
    assert [t for _, t in prose_numbers(settings)] == ["+1.61"]
    assert check(files, "+1.61%<!--@k4--> after 1,600 steps", legend) == [
        "line 1: 1,600 is not tied (nor a setting)"
    ]
    assert check(files, "12.5 and +1.61%<!--@k4-->", legend) == [
        "line 1: 12.5 is not tied (nor a setting)"
    ]
    assert check(files, "+1.61%<!--@k2-->", legend) == [
        "line 1: <!--@k2--> has no legend line",
        "line 1: +1.61 is not tied (nor a setting)",
        "@k4 is in the legend but tied to nothing",
    ]


def test_a_reference_that_names_no_single_place_is_refused(files):
    for legend, why in (
        ("x: t | K0 | gap (a/b - 1)", "0 rows"),
        ("x: t | K0=4 | 95% interval", "column '95% interval' is not one of"),
        ('x: r | "the"', '"the" is 2 times'),
        ('x: r | "full budget" "uniform"', '"uniform" is 0 times'),
        ('x: r | "nowhere"', "must be in one line of r.md, not 0"),
        ("x: q /a", "no source named 'q'"),
        ("x: t | K0=4 | gap (a/b - 1) [2]", "[2-2] of 1 numbers"),
    ):
        (problem,) = check(files, "1.0<!--@x-->", legend)
        assert problem.startswith("@x: ") and why in problem, problem


def test_blocks_are_read_from_a_page():
    page = (
        "intro 1.5\n<!-- numbers tied to t=docs/figures/bios-report.md -->\nprose\n"
        "<!-- end tied numbers -->\n```\n<!-- numbers tied to x=y.md -->\n```\n"
    )
    (block,) = tied_blocks(page, ROOT)
    assert block.files == {"t": ROOT / "docs/figures/bios-report.md"} and block.text == "prose"
    assert block.line == 2
    with pytest.raises(ValueError, match="not closed"):
        tied_blocks("<!-- numbers tied to t=a.md -->\n", ROOT)


@pytest.mark.parametrize("page", site_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_tied_number_is_the_value_it_names(page):
    problems = [
        f"{page.relative_to(ROOT)}: {problem}"
        for block in tied_blocks(page.read_text(), ROOT)
        for problem in check_block(block)
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", TIED_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_readme_and_the_study_pages_tie_their_prose_numbers(page):
    """No loose `numbers from` block is left on these pages, each has tied prose, and the
    README's results table lies inside a tied block."""
    text = page.read_text()
    loose = [paths for kind, paths, _ in blocks(text) if kind == "numbers"]
    assert not loose, f"{page.name}: prose numbers checked loosely against {loose}; tie them"
    assert tied_blocks(text, ROOT), f"{page.name}: no tied numbers"
    if page.name == "README.md":
        results = text.split("## Results\n", 1)[1].split("\n## ", 1)[0]
        table = [line for line in results.splitlines() if line.startswith("| ")]
        tied = "\n".join(block.text for block in tied_blocks(text, ROOT))
        assert table and all(line in tied for line in table), "README's results table is not tied"


@pytest.mark.parametrize("page", TIED_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_number_of_these_pages_is_tied_or_marked(page):
    problems = [f"{page.relative_to(ROOT)}: {p}" for p in unmarked_numbers(page.read_text())]
    assert not problems, "\n".join(problems)


def test_numbers_written_as_words_are_numbers(files):
    legend = 'n: r | count "uniform at"'
    assert check(files, "in four of 5 seeds", "") == [
        "line 1: four is not tied (nor a setting)"
    ]  # "5 seeds" is the study's count of seeds, a setting; "four" a measurement
    assert check(files, "worse in four seeds", "") == ["line 1: four is not tied (nor a setting)"]
    assert check(files, "uniform trails in one<!--@n--> report", legend) != []  # "one": no number
    assert check(files, "the two rates and three claims, four times the tokens", "") == []
    assert check(files, "uniform trails in two<!--@n--> lines", legend) == [
        "line 1: two is tied to @n, which is 1"
    ]
    counted = 'n: r | count "of the ceiling" "claimed"'
    assert check(files, "Two reports: 1<!--@n--> line", counted) == [
        "line 1: Two is not tied (nor a setting)"
    ]


def test_a_sign_is_part_of_the_number(files):
    legend = "m: j /claims/0/mean"
    # Written without a sign, a number is positive: a negative value needs its sign, or a tie
    # that says the prose turns it round.
    (problem,) = check(files, "0.076 nats<!--@m--> above", legend)
    assert "written without its sign" in problem
    assert check(files, "0.076 nats<!--@m--> above", "m: -j /claims/0/mean") == []
    assert check(files, "-0.076 nats<!--@m-->", legend) == []
    assert check(files, "+0.076 nats<!--@m-->", "m: -j /claims/0/mean") == []
    assert check(files, "-0.076 nats<!--@m-->", "m: -j /claims/0/mean") != []


def test_numbers_from_no_report_are_marked_with_a_reason(files):
    legend = "k4: t | K0=4 | gap (a/b - 1)\nwall: not from a report: the command's log"
    prose = "+1.61%<!--@k4-->, in 103 minutes and 17 s<!--@wall-->"
    assert check(files, prose, legend) == []
    assert check(files, "+1.61%<!--@k4--><!--@wall-->", legend) == ["line 1: @wall marks no number"]
    # A mark covers its own sentence: a number of an earlier one is still untied.
    assert check(files, "+1.61%<!--@k4-->. Four held. It took 9 s<!--@wall-->", legend) == [
        "line 1: Four is not tied (nor a setting)"
    ]
    page = (
        "# A study\n\nIt took 103 minutes.\n\n<!-- not from a report: the command's log -->\n"
        "It took 103 minutes.\n<!-- end not from a report -->\n\n```\n$ sleep 5\n```\n"
        "<!-- quoted from docs/figures/bios-report.md -->\n| 1 |\n<!-- end quote -->\n"
        "With 3 seeds at K = 4 (`--jobs 2`), <!-- 7 --> [a](x-2.md).\n"
    )
    assert unmarked_numbers(page) == [
        "line 3: 103 is neither tied nor marked as not from a report (nor a setting)"
    ]


def test_the_pages_held_whole_include_the_guides_that_quote_a_study():
    names = {page.name for page in TIED_PAGES}
    assert {"any-loop.md", "gpu-planning.md", "README.md", "figure1.md"} <= names
    assert "configuration.md" not in names


def test_the_readme_results_table_reads_at_a_glance():
    """One row a study: a one-word verdict, an answer of one sentence of about 150 characters
    with at most one number and its interval beside the paper's, the seeds in one format and
    the fresh-seed record in its own column."""
    results = (ROOT / "README.md").read_text().split("## Results\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in results.splitlines() if line.startswith("| [")]
    assert len(rows) >= 10
    for row in rows:
        study, _, verdict, answer, seeds, fresh = (
            re.sub(r"<!--.*?-->", "", cell).strip() for cell in row.strip("| ").split(" | ")
        )
        assert re.fullmatch(r"[A-Z][a-z]+", verdict), f"{study}: verdict {verdict!r}"
        assert len(answer) <= 180 and ". " not in answer, f"{study}: answer {answer!r}"
        assert len(re.findall(r"\[[^\]]*\d[^\]]*\]", answer)) <= 1, f"{study}: intervals"
        assert re.fullmatch(r"\d seeds?|computed", seeds), f"{study}: seeds {seeds!r}"
        record = r"\d of \d held \(\d seeds\)|not run|computed|run on them|rerun as the \w+ study"
        assert re.fullmatch(record, fresh), f"{study}: fresh seeds {fresh!r}"
