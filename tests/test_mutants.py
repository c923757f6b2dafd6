"""The mutation practice's list stays usable: every mutant of scripts/mutants.toml still applies
to today's code (its text occurs exactly once), changes it, compiles, and names test files that
exist. Running the mutants themselves is `python scripts/mutate.py`
(docs/development/mutation.md)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_tool():
    spec = importlib.util.spec_from_file_location("mutate", ROOT / "scripts" / "mutate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutate"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


TOOL = load_tool()
MUTANTS = TOOL.load_mutants()


def test_the_list_has_at_least_forty_mutants_with_distinct_ids():
    assert len(MUTANTS) >= 40
    assert len({m.id for m in MUTANTS}) == len(MUTANTS)


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.id)
def test_mutant_applies_to_todays_code(mutant):
    TOOL.check(mutant)


def test_a_mutant_is_restored_after_its_tests_even_when_interrupted(tmp_path, monkeypatch):
    """Ctrl-C while the mutant's tests run: the file is back, byte for byte and with its
    modification time, and no backup is left behind."""
    target = tmp_path / "module.py"
    target.write_text("VALUE = 1\n")
    before = target.stat().st_mtime_ns
    monkeypatch.setattr(TOOL, "ROOT", tmp_path)
    monkeypatch.setattr(TOOL, "BACKUP", tmp_path / ".mutate-backup.json")
    seen = []

    def interrupted(tests, timeout):
        seen.append(target.read_text())
        raise KeyboardInterrupt

    monkeypatch.setattr(TOOL, "run_tests", interrupted)
    mutant = TOOL.Mutant("m", "module.py", "VALUE = 1", "VALUE = 2", ("t.py",), "a change")
    with pytest.raises(KeyboardInterrupt):
        TOOL.run_mutant(mutant, timeout=10)
    assert seen == ["VALUE = 2\n"]
    assert target.read_text() == "VALUE = 1\n" and target.stat().st_mtime_ns == before
    assert not (tmp_path / ".mutate-backup.json").exists()


def test_a_file_left_mutated_by_a_killed_run_is_restored_on_the_next_start(tmp_path, monkeypatch):
    target = tmp_path / "module.py"
    target.write_text("VALUE = 2\n")
    backup = tmp_path / ".mutate-backup.json"
    monkeypatch.setattr(TOOL, "ROOT", tmp_path)
    monkeypatch.setattr(TOOL, "BACKUP", backup)
    backup.write_text(
        '{"file": "module.py", "source": "VALUE = 1\\n", "atime_ns": 0, "mtime_ns": 0}'
    )
    TOOL.restore_leftovers()
    assert target.read_text() == "VALUE = 1\n" and not backup.exists()


@pytest.mark.parametrize(
    ("code", "stdout", "outcome", "detail"),
    [
        (0, "", "passed", ""),
        (1, "FAILED tests/t.py::test_a - assert 1 == 2\n", "failed", "tests/t.py::test_a"),
        (2, "ERROR tests/t.py - NameError\n", "failed", "tests/t.py"),
        (4, "ERROR: not found: tests/t.py::test_gone\n", "error", "pytest exit 4"),
        (5, "", "error", "pytest exit 5"),
    ],
)
def test_only_failing_tests_kill_a_mutant(monkeypatch, code, stdout, outcome, detail):
    """Tests that fail (or a mutant that breaks an import) kill it; no test run (every named
    test deselected as slow, an id that is gone) is an error, never a kill."""

    def done(*args, **kwargs):
        return TOOL.subprocess.CompletedProcess(args, code, stdout, "")

    monkeypatch.setattr(TOOL.subprocess, "run", done)
    assert TOOL.run_tests(("tests/t.py",), timeout=10) == (outcome, detail)


RESULT = ROOT / "docs" / "development" / "mutation-result.md"


def committed_rows() -> dict[str, tuple[str, str]]:
    """Mutant id -> (file, result) of each row of the committed result's table."""
    rows = [
        line.split("|")[1:4] for line in RESULT.read_text().splitlines() if line.startswith("| ")
    ]
    return {cells[0].strip(): (cells[1].strip(), cells[2].strip()) for cells in rows[2:]}


def test_the_committed_result_is_the_scripts_table_for_todays_list():
    """docs/development/mutation-result.md is the script's table for every mutant listed now (a
    mutant added or renamed without a run fails here), with the summary line the script prints for
    it; the manual quotes that line (tests/test_doc_quotes.py), so the two cannot drift apart."""
    outcomes = {name: result for name, (_, result) in committed_rows().items()}
    assert sorted(outcomes) == sorted(m.id for m in MUTANTS)
    killed = sum(outcome == "killed" for outcome in outcomes.values())
    summary = f"{killed} of {len(MUTANTS)} mutants killed"
    assert summary in RESULT.read_text()


def test_every_file_the_committed_result_names_exists_and_is_its_mutants():
    """The result's file column names today's files: a module that moved or was renamed since the
    last run (the column is relative to src/fixedfirst/, or to the repository for a script) fails
    here, and so does a row whose mutant now edits another file."""
    named = {name: file for name, (file, _) in committed_rows().items()}
    gone = sorted(
        file
        for file in set(named.values())
        if not (ROOT / "src" / "fixedfirst" / file).is_file() and not (ROOT / file).is_file()
    )
    assert not gone, f"docs/development/mutation-result.md names files that do not exist: {gone}"
    today = {m.id: m.file.removeprefix("src/fixedfirst/") for m in MUTANTS}
    moved = sorted(name for name in named if named[name] != today.get(name))
    assert not moved, f"mutants whose file differs from scripts/mutants.toml: {moved}"
