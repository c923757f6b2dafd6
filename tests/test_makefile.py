"""The Makefile and CI say what exists: every target .PHONY names has a rule that make accepts,
and .ci/run checks lint and types before it runs the tests."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAKEFILE = ROOT / "Makefile"


def phony_targets(text: str) -> list[str]:
    (line,) = [line for line in text.splitlines() if line.startswith(".PHONY:")]
    return line.removeprefix(".PHONY:").split()


def rules(text: str) -> set[str]:
    """Targets with a rule of their own: `NAME:` at the start of a line (not `NAME :=`)."""
    return set(re.findall(r"^([A-Za-z][\w.-]*):(?!=)", text, flags=re.MULTILINE))


def test_rules_are_read_from_makefile_text():
    text = ".PHONY: a b\nPY := x\na: b\n\techo a\nb:\n\techo b\n"
    assert phony_targets(text) == ["a", "b"]
    assert rules(text) == {"a", "b"}


def test_every_phony_target_has_a_rule():
    text = MAKEFILE.read_text()
    missing = [t for t in phony_targets(text) if t not in rules(text)]
    assert missing == [], f"the Makefile declares targets it does not define: {missing}"


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_accepts_every_phony_target():
    """`make -n` plans each target without running it: a missing prerequisite or a broken rule
    fails here."""
    for target in phony_targets(MAKEFILE.read_text()):
        done = subprocess.run(
            ["make", "-n", "-C", str(ROOT), target], capture_output=True, text=True
        )
        assert done.returncode == 0, f"make -n {target}: {done.stderr.strip()}"


def test_ci_checks_lint_and_types_before_the_tests():
    commands = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip().startswith("make ")
    ]
    assert commands.index("make lint") < commands.index("make test")
    assert commands.index("make typecheck") < commands.index("make test")
