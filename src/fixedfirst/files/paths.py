"""Where a path in a configuration points, how a run stores it, and how messages show it.

A relative `data.path` or `model.checkpoint` means relative to the file that holds it (a run
config, a sweep file, a preset), never to wherever the command happens to run: `cd elsewhere &&
fixedfirst eval RUN` must read the same data. A run stores the path absolute in its
config.toml, so the run can be moved or shared and still find its validation data
(docs/design.md §7). Messages show a path
under the working directory relative to it, so they read as the user typed them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def against(base_dir: str | Path, path: str) -> str:
    """`path` resolved against `base_dir` when relative (`~` expanded), kept as short as the
    user wrote it: a config in the working directory naming "data" still says "data"."""
    expanded = os.path.expanduser(path)
    if os.path.isabs(expanded):
        return expanded
    return os.path.normpath(os.path.join(base_dir, expanded))


PATH_KEYS = (("data", "path"), ("model", "checkpoint"))
"""The keys of a configuration that name a path: the prepared data, the checkpoint a run
starts from."""


def resolve_paths(raw: dict[str, Any], base_dir: str | Path) -> dict[str, Any]:
    """The raw configuration with a relative data.path and model.checkpoint made relative to
    `base_dir` (the directory of the file it was read from); everything else untouched."""
    out = dict(raw)
    for section, key in PATH_KEYS:
        table = raw.get(section)
        if not isinstance(table, dict) or not isinstance(table.get(key), str):
            continue
        if not table[key].strip():  # left as written, for the section to refuse by name
            continue
        out[section] = {**table, key: against(base_dir, table[key])}
    return out


def absolute(path: str) -> str:
    """The absolute, normalised form a run stores (symlinks kept: they are the user's)."""
    return os.path.abspath(os.path.expanduser(path))


def shown(path: str | Path) -> str:
    """`path` as a message shows it: relative to the working directory when below it."""
    text = str(path)
    if not os.path.isabs(text):
        return text
    try:
        relative = os.path.relpath(text)
    except ValueError:  # another drive (Windows)
        return text
    return text if relative == ".." or relative.startswith(".." + os.sep) else relative
