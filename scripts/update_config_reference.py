"""Regenerate the configuration reference in docs/guides/configuration.md from the code's field
docstrings (`fixedfirst config-reference --markdown`); tests/test_docs.py fails when it is stale."""

import subprocess
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parents[1] / "docs" / "guides" / "configuration.md"
START, END = "<!-- config-reference:start -->\n", "<!-- config-reference:end -->"

reference = subprocess.run(
    [sys.executable, "-m", "fixedfirst", "config-reference", "--markdown"],
    capture_output=True,
    text=True,
    check=True,
).stdout
text = PAGE.read_text()
i, j = text.index(START) + len(START), text.index(END)
PAGE.write_text(text[:i] + reference + text[j:])
