"""The README's configuration reference is the code's, word for word."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_config_reference_is_current():
    generated = subprocess.run(
        [sys.executable, "-m", "fixedfirst", "config-reference", "--markdown"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    readme = (ROOT / "README.md").read_text()
    start = readme.index("<!-- config-reference:start -->\n") + len(
        "<!-- config-reference:start -->\n"
    )
    end = readme.index("<!-- config-reference:end -->")
    assert readme[start:end] == generated, (
        "README configuration reference is stale: run `python scripts/update_readme_reference.py`"
    )
