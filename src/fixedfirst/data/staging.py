"""Where `prepare` writes DATA before it is DATA: `.NAME.partial` beside it, one per --out.

Everything goes into the staging directory, which is renamed to DATA once complete, so an
interrupted prepare never leaves half a dataset under the name DATA, and the directory is removed
on any failure (with the parent directories it had to create). An OS lock on a file inside
(`fcntl.flock`, dropped by the kernel when the holder exits, however it exits) makes the
directory one prepare's: a second prepare into the same --out is refused at once, naming the
first, rather than after its whole run; one that finds the directory left by a killed prepare
takes the lock and clears it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import sys
from pathlib import Path
from types import TracebackType

from fixedfirst.errors import UserError
from fixedfirst.files.paths import shown

LOCK_FILE = ".lock"
SCRATCH = ".scratch"
"""Inside the staging directory: what is needed while preparing and is not data (copies of
pipes), removed before the directory becomes DATA."""


class Staging:
    """The staging directory of --out `out`, held while the `with` body runs."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.path = out.parent / f".{out.name}.partial"
        self.made: list[Path] = []
        """Parent directories of `out` this prepare created (removed again on failure)."""
        self.lock: int | None = None
        self.published = False

    def __enter__(self) -> Staging:
        missing = [p for p in reversed(self.out.parents) if not p.exists()]
        for parent in missing:
            parent.mkdir()
            self.made.append(parent)
        self.path.mkdir(exist_ok=True)
        lock = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            pid, _, command = os.pread(lock, 300, 0).decode(errors="replace").strip().partition(" ")
            os.close(lock)
            self.made.clear()  # not ours to remove: the other prepare's parents too
            holder = f"PID {pid}, `{command}`" if pid.isdigit() else "another process"
            raise UserError(
                f"--out {shown(self.out)}: another prepare is writing it now ({holder}); "
                "wait for it to finish, or choose another --out"
            ) from None
        self.lock = lock
        for leftover in self.path.iterdir():  # a killed prepare's (it holds no lock)
            if leftover.name != LOCK_FILE:
                _remove(leftover)
        os.ftruncate(lock, 0)
        command = " ".join(["prepare", *sys.argv[2:]] if sys.argv[1:2] == ["prepare"] else sys.argv)
        os.pwrite(lock, f"{os.getpid()} {command}\n".encode(), 0)
        return self

    @property
    def scratch(self) -> Path:
        return self.path / SCRATCH

    def publish(self) -> None:
        """Rename the complete directory to `out` (an empty directory there is replaced)."""
        shutil.rmtree(self.scratch, ignore_errors=True)
        if self.out.exists():
            self.out.rmdir()
        try:
            os.rename(self.path, self.out)
        except OSError:
            raise UserError(
                f"--out {shown(self.out)}: was created by someone else while preparing; "
                "nothing overwritten"
            ) from None
        self.published = True
        with contextlib.suppress(OSError):
            os.unlink(self.out / LOCK_FILE)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if not self.published and self.lock is not None:
            shutil.rmtree(self.path, ignore_errors=True)
        if self.lock is not None:
            os.close(self.lock)
        if not self.published:
            for parent in reversed(self.made):
                with contextlib.suppress(OSError):
                    parent.rmdir()


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
