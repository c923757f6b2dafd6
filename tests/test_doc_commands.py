"""Every command the README and the manual show is one that exists, with those flags.

In code blocks of README.md and the site's hand-written pages, a line that runs `fixedfirst ...`
(after an optional `$ ` prompt and `VAR=value` assignments, continued over lines ending in a
backslash) must parse against the command line's own argparse parser, and a `make X` line must
name targets the Makefile has. TOML blocks are configurations: a run's, or a sweep file's when it
has a `[base...]` table, and each must be one the code accepts.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from fixedfirst.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
GENERATED = ("figures", "probes", "diagnose")  # command outputs, not pages written by hand
ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")


def manual_pages() -> list[Path]:
    pages = [ROOT / "README.md"]
    for page in sorted((ROOT / "docs").rglob("*.md")):
        if page.relative_to(ROOT / "docs").parts[0] not in GENERATED:
            pages.append(page)
    return pages


def code_blocks(text: str) -> list[tuple[str, list[str]]]:
    """(info string, lines) of every fenced code block."""
    found, info, lines = [], None, []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            if info is None:
                info, lines = stripped[3:].strip(), []
            else:
                found.append((info, lines))
                info = None
        elif info is not None:
            lines.append(line)
    return found


def shell_commands(lines: list[str]) -> list[list[str]]:
    """Each shell line as words, continuations joined, comments, prompts and variables dropped.
    In a transcript (a block where some line starts with the `$ ` prompt) only prompted lines are
    commands: the rest is what they printed."""
    commands, pending = [], ""
    transcript = any(line.lstrip().startswith("$ ") for line in lines)
    for line in lines:
        if transcript and not pending and not line.lstrip().startswith("$ "):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        text = (pending + line).strip()
        pending = ""
        text = text.removeprefix("$ ")
        try:
            lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            lexer.commenters = "#"
            tokens = list(lexer)
        except ValueError:  # program output, not a command
            continue
        words: list[str] = []
        for token in [*tokens, ";"]:  # a pipeline, a list or `&` ends a command
            if token and set(token) <= set("|&;()<>"):
                while words and ASSIGNMENT.match(words[0]):
                    words = words[1:]
                if words:
                    commands.append(words)
                words = []
            else:
                words.append(token)
    return commands


def shown(kind: str) -> list[tuple[str, list[str]]]:
    found = []
    for page in manual_pages():
        for info, lines in code_blocks(page.read_text()):
            if info in ("", "bash", "sh", "console"):
                for words in shell_commands(lines):
                    if words[0] == kind:
                        found.append((page.relative_to(ROOT).as_posix(), words))
    return found


def make_targets() -> set[str]:
    makefile = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z0-9_.-]+):", makefile, flags=re.M))


class ParseError(Exception):
    pass


def parse(words: list[str]) -> argparse.Namespace:
    """The command line's parse of `fixedfirst WORDS`; ParseError with argparse's message."""
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            return build_parser().parse_args(words)
    except SystemExit as e:  # a usage error (2), or --help (0)
        raise ParseError(errors.getvalue().strip().splitlines()[-1:] or f"exit {e.code}") from None


def test_commands_are_found_in_the_manual():
    commands = shown("fixedfirst")
    assert len(commands) >= 30
    assert len({page for page, _ in commands}) >= 8
    assert any(words[1] == "train" for _, words in commands)


@pytest.mark.parametrize(
    ("page", "words"), shown("fixedfirst"), ids=lambda x: x if isinstance(x, str) else x[1]
)
def test_every_command_shown_parses(page, words):
    try:
        parse(words[1:])
    except ParseError as e:
        pytest.fail(f"{page}: `{shlex.join(words)}` does not parse: {e}")


def test_the_parse_check_refuses_what_the_command_line_refuses():
    with pytest.raises(ParseError):
        parse(["train", "mine.toml", "--out", "runs/x", "--no-such-flag"])
    with pytest.raises(ParseError):
        parse(["no-such-command"])
    with pytest.raises(ParseError):
        parse(["export", "RUN", "--out", "DIR", "--format", "onnx"])
    parse(["export", "RUN", "--out", "DIR", "--format", "hf"])


@pytest.mark.parametrize(
    ("page", "words"), shown("make"), ids=lambda x: x if isinstance(x, str) else " ".join(x)
)
def test_every_make_target_shown_exists(page, words):
    targets = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    assert targets, f"{page}: `{shlex.join(words)}` names no target"
    missing = [t for t in targets if t not in make_targets()]
    assert not missing, f"{page}: `{shlex.join(words)}`: the Makefile has no target {missing}"


def toml_blocks() -> list[tuple[str, str]]:
    return [
        (page.relative_to(ROOT).as_posix(), "\n".join(lines))
        for page in manual_pages()
        for info, lines in code_blocks(page.read_text())
        if info == "toml"
    ]


def test_toml_blocks_are_found():
    assert len(toml_blocks()) >= 6


@pytest.mark.parametrize(("page", "text"), toml_blocks(), ids=lambda x: x[:40])
def test_every_configuration_shown_is_accepted(page, text, tmp_path):
    from fixedfirst.config import RunConfig, read_toml
    from fixedfirst.data.registry import resolve_data
    from fixedfirst.studies.sweep.spec import load_sweep
    from tests.inkling_helpers import HAS_INKLING

    path = tmp_path / "shown.toml"
    path.write_text(text)
    data = read_toml(path)
    if data.get("model", {}).get("kind") == "transformers" and not HAS_INKLING:
        pytest.skip("a transformers looped model's configuration; this transformers lacks it")
    if "base" in data:
        assert load_sweep(path).runs
    else:
        assert resolve_data(RunConfig.from_dict(data))
