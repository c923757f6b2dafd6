"""Where a path in a configuration points, how a run stores it, and how messages show it.

A relative `data.path` means relative to the file that holds it (a run config, a sweep file,
a preset), never to wherever the command happens to run: `cd elsewhere && fixedfirst eval RUN`
must read the same data. A run stores the path absolute in its config.toml, so the run can be
moved or shared and still find its validation data (docs/design.md §7). Messages show a path
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


def resolve_data_path(raw: dict[str, Any], base_dir: str | Path) -> dict[str, Any]:
    """The raw configuration with a relative [data] path made relative to `base_dir` (the
    directory of the file it was read from); everything else untouched."""
    data = raw.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("path"), str):
        return raw
    if not data["path"].strip():  # left as written, for DataConfig to refuse by name
        return raw
    return {**raw, "data": {**data, "path": against(base_dir, data["path"])}}


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
