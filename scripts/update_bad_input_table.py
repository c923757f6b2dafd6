"""Regenerate docs/reference/bad-input.md by running every bad-input case of
tests/bad_input_cases.py."""

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from tests.bad_input_cases import (  # noqa: E402
    all_cases,
    build_assets,
    prepare_work,
    run_case,
    table_header,
    table_row,
)
from tests.bad_input_newcomer import all_notices, notice_header, notice_row, told  # noqa: E402

DOC = ROOT / "docs" / "reference" / "bad-input.md"

with tempfile.TemporaryDirectory() as tmp:
    assets = Path(tmp) / "assets"
    build_assets(assets)
    rows = []
    for number, case in enumerate(all_cases(), 1):
        if case.skip:
            sys.exit(f"cannot regenerate the table here: case {case.id} is skipped ({case.skip})")
        work = Path(tmp) / "cases" / case.id
        prepare_work(case, assets, work)
        outcome = run_case(case, work)
        lines = outcome.stderr.splitlines()
        if outcome.code != 2 or len(lines) != 1 or case.fragment not in lines[0]:
            sys.exit(
                f"case {case.id} does not hold: exit {outcome.code}, stderr {outcome.stderr!r}"
            )
        rows.append(table_row(number, case, lines[0]))
    notices = []
    for number, notice in enumerate(all_notices(), 1):
        work = Path(tmp) / "notices" / notice.id
        prepare_work(notice, assets, work)
        line = told(notice, run_case(notice, work), work)
        if line is None:
            sys.exit(f"notice {notice.id} does not hold")
        notices.append(notice_row(number, notice, line))
text = table_header(len(rows)) + "\n".join(rows) + "\n"
DOC.write_text(text + notice_header(len(notices)) + "\n".join(notices) + "\n")
print(f"wrote {DOC} ({len(rows)} cases, {len(notices)} notices)")
