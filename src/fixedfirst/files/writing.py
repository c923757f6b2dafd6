"""Writing files: atomically, readable like the rest, never over a file that is not ours.

Every file a command writes goes through here, so that
- a reader (or a crash) never sees half a file: it is written under a temporary name beside
  the target, flushed, then renamed over it;
- a failing write (read-only directory, full disk, a path through a file) is one line that
  names the path and the reason, not a traceback;
- an `--out FILE` that already exists is overwritten only when fixedfirst wrote it (its JSON
  names a fixedfirst format, its figure carries our mark), or with `--force`;
- files are created with the usual permissions (0666 less the umask), also where a library
  (safetensors) creates them 0600.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fixedfirst.errors import UserError
from fixedfirst.files.paths import shown

MARK = "fixedfirst"
"""Written into every figure's metadata; how a later --out recognises its own file."""
FIGURE_FORMATS = (".png", ".pdf", ".svg")


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def remedy(error: OSError) -> str:
    """What to do about a failed write, where the error says it: free space, fix permissions."""
    if error.errno in DISK_FULL:
        return "the disk is full: free space"
    if error.errno == errno.EROFS:
        return "the file system is read-only: write somewhere else"
    if error.errno in (errno.EACCES, errno.EPERM):
        return "fix the permissions or write somewhere else"
    return "fix the cause"


def write_error(path: str | Path, error: OSError, what: str = "write") -> UserError:
    """A one-line UserError for an OSError met while writing `path` (a full disk said so)."""
    reason = error.strerror or str(error)
    if error.errno in DISK_FULL:
        reason += f"; {remedy(error)} and run the command again (nothing was left behind)"
    return UserError(f"cannot {what} {shown(path)}: {reason}")


def os_error_behind(error: BaseException, path: str | Path) -> OSError | None:
    """The system's error behind a library's failed write, or None when there is none.
    safetensors reports it only in its message ("... (os error 28)"); torch.save into a file
    object raises a RuntimeError while handling the OSError of the write."""
    if isinstance(error, OSError):
        return error
    if isinstance(error.__context__, OSError):
        return error.__context__
    found = re.search(r"\(os error (\d+)\)", str(error))
    if found is None:
        return None
    code = int(found.group(1))
    return OSError(code, os.strerror(code), str(path))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def readable_like_the_rest(path: str | Path) -> None:
    """Give a file the mode a plain open() would have (safetensors creates files 0600)."""
    os.chmod(path, 0o666 & ~_umask())


def write_atomic(path: str | Path, write: Callable[[Path], object]) -> None:
    """Run `write(tmp)` for a temporary file beside `path`, then rename it over `path`."""
    write_together({Path(path): write})


def write_together(writes: dict[Path, Callable[[Path], object]]) -> None:
    """Write several files as one (a page and its picture): each into a temporary file beside
    it, and only once every one is written, rename them over their targets; a failed write (a
    disk with room for one but not the other) leaves every target as it was."""
    temporary = {path: path.with_name(f".{path.name}.tmp-{os.getpid()}") for path in writes}
    current = next(iter(writes))
    try:
        for current, write in writes.items():
            tmp = temporary[current]
            write(tmp)
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            readable_like_the_rest(tmp)
        for path, tmp in temporary.items():
            os.replace(tmp, path)
    except OSError as e:
        for tmp in temporary.values():
            _remove(tmp)
        raise write_error(current, e) from None
    except BaseException:
        for tmp in temporary.values():
            _remove(tmp)
        raise


def _remove(path: Path) -> None:
    """Clean up after a failed write, never hiding the failure with one of its own."""
    with contextlib.suppress(OSError):
        path.unlink(missing_ok=True)


def write_text_atomic(path: str | Path, text: str) -> None:
    write_atomic(path, lambda p: p.write_text(text, encoding="utf-8"))


def write_json_atomic(path: str | Path, value: Any) -> None:
    write_text_atomic(path, json.dumps(value, indent=2) + "\n")


def is_our_json(path: Path) -> bool:
    """A JSON file whose top-level "format" names one of fixedfirst's formats."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(value, dict) and str(value.get("format", "")).startswith(MARK)


def is_our_figure(path: Path) -> bool:
    """A figure saved by `save_figure` (its metadata holds MARK)."""
    try:
        with open(path, "rb") as f:
            return MARK.encode() in f.read(1 << 24)
    except OSError:
        return False


def check_output_file(
    path: Path, ours: Callable[[Path], bool], force: bool = False, option: str = "--out"
) -> None:
    """Refuse an output file that cannot or may not be written, before any work is done:
    a directory, a missing parent directory, or an existing file fixedfirst did not write."""
    if path.is_dir():
        raise UserError(f"{option} {shown(path)} is a directory; give a file name")
    if not path.parent.is_dir():
        raise UserError(f"{option} {shown(path)}: directory {shown(path.parent)} does not exist")
    if path.exists() and not force and not ours(path):
        raise UserError(
            f"{option} {shown(path)} exists and was not written by fixedfirst; nothing was "
            "written (choose another name, or pass --force to replace it)"
        )


def check_figure_name(path: Path, option: str = "--out") -> None:
    """Figures are PNG, PDF or SVG, named by their extension."""
    if path.suffix.lower() not in FIGURE_FORMATS:
        given = f"'{path.suffix}'" if path.suffix else "no extension"
        raise UserError(
            f"{option} {shown(path)}: a figure is written as {', '.join(FIGURE_FORMATS)} "
            f"(the name has {given})"
        )


def figure_writer(fig: Any, path: str | Path, dpi: int = 130) -> Callable[[Path], object]:
    """What writes a matplotlib figure in the format `path` names, marked as ours in its
    metadata (for `write_atomic` or `write_together`)."""
    path = Path(path)
    check_figure_name(path, "figure")
    fmt = path.suffix.lower().lstrip(".")
    key = "Software" if fmt == "png" else "Creator"
    return lambda p: fig.savefig(p, format=fmt, dpi=dpi, metadata={key: MARK})


def save_figure(fig: Any, path: str | Path, dpi: int = 130) -> Path:
    """Save a matplotlib figure atomically, marked as ours in its metadata."""
    path = Path(path)
    write_atomic(path, figure_writer(fig, path, dpi))
    return path
