"""Regenerate the configuration reference in README.md from the code's field docstrings."""

import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
START, END = "<!-- config-reference:start -->\n", "<!-- config-reference:end -->"

reference = subprocess.run(
    [sys.executable, "-m", "fixedfirst", "config-reference", "--markdown"],
    capture_output=True,
    text=True,
    check=True,
).stdout
text = README.read_text()
i, j = text.index(START) + len(START), text.index(END)
README.write_text(text[:i] + reference + text[j:])
