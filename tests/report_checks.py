"""The check every study's end-to-end test makes of its report: remade from STEM.json alone."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any


def assert_report_remade(
    out: Path,
    render: Callable[[dict[str, Any]], str],
    from_everything: str,
    tmp: Path,
    stem: str = "report",
) -> None:
    """OUT/STEM.md, as the command wrote it, is byte for byte what `render` makes of OUT/STEM.json
    alone (copied into a fresh directory, the working directory there, OUT moved away so that
    nothing of the runs can be read), and what the report's code makes of everything the command
    measured (`from_everything`): STEM.json left out nothing the report reads."""
    written = (out / f"{stem}.md").read_bytes()
    fresh = tmp / "fresh"
    fresh.mkdir()
    shutil.copy(out / f"{stem}.json", fresh)
    away = out.with_name(out.name + "-moved-away")
    out.rename(away)
    try:
        with contextlib.chdir(fresh):
            remade = render(json.loads(Path(f"{stem}.json").read_text()))
    finally:
        away.rename(out)
    assert remade.encode() == written, f"{stem}.md differs from what {stem}.json alone makes"
    assert from_everything.encode() == written, f"{stem}.json lacks something {stem}.md reads"
