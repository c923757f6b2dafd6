"""Bad input through the real command line: one clear line, exit 2, nothing on disk changed;
and input a command accepts but must speak up about (`all_notices`): exit 0 and a line saying
what it did.

The cases are data (tests/bad_input_cases.py and the files it gathers; tests/bad_input_newcomer.py
and the files its `all_notices` gathers for the notices); docs/reference/bad-input.md is the same
lists as two tables, and each case checks that its row there is what the command prints now.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.bad_input_cases import (
    CASES,
    all_cases,
    build_assets,
    prepare_work,
    run_case,
    snapshot,
    table_header,
    table_row,
)
from tests.bad_input_newcomer import all_notices, notice_header, notice_row, told

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reference" / "bad-input.md"
NUMBERED = list(enumerate(all_cases(), 1))
NOTICES_NUMBERED = list(enumerate(all_notices(), 1))


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bad-input-assets")
    build_assets(root / "assets")
    return root / "assets"


def test_at_least_25_new_cases_with_unique_ids():
    assert len(CASES) >= 25
    ids = [case.id for _, case in NUMBERED]
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize(("number", "case"), NUMBERED, ids=[c.id for _, c in NUMBERED])
def test_bad_input(number, case, assets, tmp_path):
    if case.skip:
        pytest.skip(case.skip)
    work = tmp_path / "work"
    prepare_work(case, assets, work)
    before = snapshot(work)
    outcome = run_case(case, work)
    assert outcome.code == 2, outcome
    assert "Traceback" not in outcome.stderr
    lines = outcome.stderr.splitlines()
    assert len(lines) == 1, outcome.stderr
    assert lines[0].startswith(f"fixedfirst {case.argv[0]}: error: ")
    assert case.fragment in lines[0]
    assert snapshot(work) == before, "a refused command changed files on disk"
    rows = DOC.read_text().splitlines()
    assert table_row(number, case, lines[0]) in rows, (
        f"docs/reference/bad-input.md is stale for case {case.id}: "
        "run `python scripts/update_bad_input_table.py`"
    )


@pytest.mark.parametrize(
    ("number", "notice"), NOTICES_NUMBERED, ids=[n.id for _, n in NOTICES_NUMBERED]
)
def test_notice(number, notice, assets, tmp_path):
    work = tmp_path / "work"
    prepare_work(notice, assets, work)
    before = snapshot(work)
    outcome = run_case(notice, work)
    assert "Traceback" not in outcome.stderr
    line = told(notice, outcome, work)
    assert line is not None, outcome
    after = snapshot(work)
    assert {k: after.get(k) for k in before} == before, "a file that was on disk changed"
    assert notice_row(number, notice, line) in DOC.read_text().splitlines(), (
        f"docs/reference/bad-input.md is stale for notice {notice.id}: "
        "run `python scripts/update_bad_input_table.py`"
    )


def test_the_tables_have_one_row_per_case_and_say_how_many():
    text = DOC.read_text()
    rows = [line for line in text.splitlines() if re.match(r"\| \d+ \|", line)]
    assert len(rows) == len(NUMBERED), "run `python scripts/update_bad_input_table.py`"
    assert text.startswith(table_header(len(NUMBERED))), "the introduction's count is stale"
    notices = [line for line in text.splitlines() if re.match(r"\| N\d+ \|", line)]
    assert len(notices) == len(NOTICES_NUMBERED), "run `python scripts/update_bad_input_table.py`"
    assert notice_header(len(NOTICES_NUMBERED)) in text, "the notices' count is stale"
