"""Bad input through the real command line: one clear line, exit 2, nothing on disk changed.

The cases are data (tests/bad_input_cases.py); docs/bad-input.md is the same list as a table,
and each case checks that its row there is what the command prints now.
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

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "bad-input.md"
NUMBERED = list(enumerate(all_cases(), 1))


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
        f"docs/bad-input.md is stale for case {case.id}: "
        "run `python scripts/update_bad_input_table.py`"
    )


def test_the_table_has_one_row_per_case_and_says_how_many():
    text = DOC.read_text()
    rows = [line for line in text.splitlines() if re.match(r"\| \d+ \|", line)]
    assert len(rows) == len(NUMBERED), "run `python scripts/update_bad_input_table.py`"
    assert text.startswith(table_header(len(NUMBERED))), "the introduction's count is stale"
