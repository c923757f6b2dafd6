"""Write every committed study report again from the results committed beside it: what
tests/test_committed_reports.py checks, made. Run after a change to a study's report code (its
analysis, its words), then commit the reports it rewrites and update the pages the page tests
(tests/test_doc_quotes.py, tests/test_tied_numbers.py) name.

    .venv/bin/python scripts/remake_reports.py            # every study of COMMITTED
    .venv/bin/python scripts/remake_reports.py chains     # the studies whose name contains it

It prints each report it rewrote; the results files are only read.
"""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from tests.test_committed_reports import COMMITTED, FIGURES  # noqa: E402

wanted = sys.argv[1:]
for committed in COMMITTED:
    if wanted and not any(w in committed.study for w in wanted):
        continue
    results = json.loads((FIGURES / committed.results).read_text())
    for name, text in zip(committed.reports, committed.remake(results), strict=True):
        path = FIGURES / name
        if path.read_text() != text:
            path.write_text(text)
            print(f"rewrote docs/figures/{name} from docs/figures/{committed.results}")
