"""One writer per run or experiment directory: an OS file lock held while a command writes.

`fcntl.flock` on DIR/.lock: the kernel drops it when the holder exits, however it exits
(kill -9 included), so a crash never leaves a stale lock to clear by hand. The holder writes
its PID and command into the file, so a second writer is refused in one line that says who
holds the directory. The file is removed on release; a writer that locked a file in the
moment it was removed sees that the path no longer names its file and tries again.

Locks are re-entrant within a process (a sweep's evaluation writes into runs it has just
trained), and under torchrun only rank 0 takes them: it alone writes the run directory.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from fixedfirst.errors import UserError
from fixedfirst.files.paths import shown

LOCK_FILE = ".lock"
_held: dict[str, list[int]] = {}
"""realpath of a locked directory -> [file descriptor, depth] for the locks this process holds."""


def _holder(path: Path) -> str:
    try:
        pid, _, command = path.read_text().strip().partition(" ")
    except OSError:
        return "another process"
    if not pid.isdigit():
        return "another process"
    return f"PID {pid}" + (f", `{command}`" if command else "")


def acquire(directory: str | Path, command: str, hint: str = "") -> None:
    """Lock `directory` (which must exist) for this process, or raise a one-line UserError
    (ending in `hint`, when given: how to do without the lock)."""
    import fcntl

    directory = Path(directory)
    key = os.path.realpath(directory)
    if key in _held:
        _held[key][1] += 1
        return
    path = directory / LOCK_FILE
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            also = f"; {hint}" if hint else ""
            raise UserError(
                f"cannot write into {shown(directory)}: {e.strerror or e}{also}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            also = f", or {hint}" if hint else ""
            raise UserError(
                f"{shown(directory)} is being written by another fixedfirst process "
                f"({_holder(path)}); wait for it to finish or stop it (Ctrl-C saves a "
                f"checkpoint){also}"
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed the file as we opened it: lock the new one
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()} {command}\n".encode())
    _held[key] = [fd, 1]


def release(directory: str | Path) -> None:
    key = os.path.realpath(directory)
    entry = _held.get(key)
    if entry is None:
        return
    entry[1] -= 1
    if entry[1] > 0:
        return
    del _held[key]
    with contextlib.suppress(OSError):
        os.unlink(Path(directory) / LOCK_FILE)  # still ours: we hold the lock
    os.close(entry[0])


@contextlib.contextmanager
def holding(directory: str | Path, command: str, hint: str = "") -> Iterator[None]:
    """Hold the lock of `directory` for the body of a `with`."""
    acquire(directory, command, hint)
    try:
        yield
    finally:
        release(directory)


def is_held(directory: str | Path) -> bool:
    """Whether this process holds the lock of `directory`."""
    return os.path.realpath(directory) in _held
