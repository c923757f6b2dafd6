"""Bad input at the hard edges (issue 15): values the libraries under us refuse, unbounded
costs, files that are not ours, read-only places, a run another process is writing, shapes that
cannot be allocated. Part of the bad-input table (`all_cases` in tests/bad_input_cases.py).

Read-only places: the tests run as root, whom permission bits do not stop, so besides clearing
the write bits (which stops everyone else) a Python audit hook refuses, with the EACCES the
kernel gives, every write below a read-only path while the command runs: opening for writing,
making, renaming or removing. Every one of our writes is a Python call, so the hook sees it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.bad_input_cases import Case, bad_config

_READ_ONLY: list[str] = []
_HOOKED = False
_HOLDERS: list[subprocess.Popen] = []
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _deny(path: object, unless_exists: bool = False) -> None:
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, (str, os.PathLike)):
        return  # a file descriptor
    real = os.path.realpath(path)
    if unless_exists and os.path.exists(real):
        return  # mkdir of an existing directory fails with EEXIST, not EACCES
    if any(real == ro or real.startswith(ro + os.sep) for ro in _READ_ONLY):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))


def _hook(event: str, args: tuple) -> None:
    if not _READ_ONLY:
        return
    if event == "open" and isinstance(args[2], int) and args[2] & WRITE_FLAGS:
        _deny(args[0])
    elif event == "os.mkdir":
        _deny(args[0], unless_exists=True)
    elif event in ("os.remove", "os.rmdir", "os.truncate", "os.chmod"):
        _deny(args[0])
    elif event == "os.rename":
        _deny(args[0])
        _deny(args[1])


@contextlib.contextmanager
def read_only(paths: list[Path]) -> Iterator[None]:
    """Make `paths` (and everything below them) read-only while the body runs."""
    global _HOOKED
    if not paths:
        yield
        return
    if not _HOOKED:
        sys.addaudithook(_hook)
        _HOOKED = True
    modes = {}
    for root in paths:
        for p in [root, *root.rglob("*")]:
            modes[p] = p.stat().st_mode
            p.chmod(modes[p] & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    _READ_ONLY[:] = [os.path.realpath(p) for p in paths]
    try:
        yield
    finally:
        _READ_ONLY.clear()
        for p, mode in modes.items():
            p.chmod(mode)


HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0)
command = sys.argv[2] if len(sys.argv) > 2 else "train"
os.write(fd, f"4242 {command}\\n".encode())  # a fixed PID: the table's row stays the same
print("held", flush=True)
time.sleep(60)
"""


def another_writer_holds(run: str, command: str = "train"):
    """A setup: another process, running `command`, holds the lock of the directory `run`
    (released after the case runs)."""

    def setup(work: Path) -> None:
        (work / run).mkdir(exist_ok=True)
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(work / run / ".lock"), command],
            stdout=subprocess.PIPE,
        )
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        _HOLDERS.append(holder)

    return setup


def release_lock_holders() -> None:
    while _HOLDERS:
        holder = _HOLDERS.pop()
        holder.kill()
        holder.wait()


def victim(work: Path) -> None:
    (work / "victim.py").write_text("print('my own script')\n")
    (work / "notes.png").write_bytes(b"\x89PNG\r\n\x1a\n drawn by hand")
    (work / "results").mkdir()


def read_only_dir(work: Path) -> None:
    (work / "ro").mkdir()


RO = ("ro",)
EDGE_CASES: list[Case] = [
    # Values that pass a type check but that numpy, torch or AdamW refuse or blow up on.
    bad_config(
        "seed-negative",
        "a negative seed (numpy refuses one)",
        "[train]\nseed = -1\n",
        "train.seed: must be in [0, 2**63 - 1], got -1",
    ),
    bad_config(
        "data-seed-negative",
        "a negative data seed",
        "[data]\nseed = -2\n",
        "data.seed: must be in [0, 2**63 - 1], got -2",
    ),
    bad_config(
        "lr-absurd",
        "a learning rate AdamW diverges at once",
        "[train]\nlr = 5.0\n",
        "train.lr: must be <= 1",
    ),
    bad_config(
        "sigma-absurd",
        "a Poisson-lognormal sigma whose rate overflows",
        '[schedule]\nkind = "poisson-lognormal"\nsigma = 50.0\n',
        "schedule.sigma: must be in (0, 4], got 50.0",
    ),
    Case(
        "toml-bom",
        "config",
        "a config file saved as UTF-8 with a byte-order mark (BOM)",
        ["train", "bad.toml", "--out", "new-run"],
        "starts with a byte-order mark (BOM)",
        files={"bad.toml": "\ufeff[train]\nlr = 0.001\n"},
    ),
    Case(
        "generate-temperature-tiny",
        "generate",
        "`generate --temperature 1e-300` (softmax overflows float32)",
        ["generate", "tokens-run", "--prompt", "river", "--temperature", "1e-300"],
        "--temperature must be 0 (greedy) or in [0.0001, 100], got 1e-300",
        needs=("tokens-run", "data"),
    ),
    Case(
        "generate-seed-negative",
        "generate",
        "`generate --seed -1`",
        ["generate", "tokens-run", "--prompt", "river", "--temperature", "1", "--seed", "-1"],
        "--seed must be in [0, 2**63 - 1], got -1",
        needs=("tokens-run", "data"),
    ),
    # Costs without a bound.
    Case(
        "compute-k-max-huge",
        "bounds",
        "`compute --set schedule.k_max=100000000` (cost linear in k_max)",
        ["compute", "tiny.toml", "--set", "schedule.k_max=100000000"],
        "schedule.k_max: must be <= 1,024 (evaluation and training cost grow linearly",
        needs=("tiny.toml",),
    ),
    Case(
        "eval-depth-huge",
        "bounds",
        "`eval --depths 1..10000`",
        ["eval", "run", "--depths", "1..10000"],
        "--depths '1..10000': depths must be <= 1,024",
        needs=("run",),
    ),
    Case(
        "tokens-huge",
        "bounds",
        "a token budget of 10^13 tokens (every step's depth is planned first)",
        ["compute", "tiny.toml", "--set", "train.tokens=10_000_000_000_000"],
        "more than the 1,000,000 a run may plan",
        needs=("tiny.toml",),
    ),
    Case(
        "model-does-not-fit",
        "bounds",
        "a model whose weights alone do not fit in memory: `--set model.d_model=262144`",
        [
            *["train", "tiny.toml", "--out", "new-run", "--set", "model.d_model=262144"],
            *["--set", "train.device=cpu"],
        ],
        "more than this cpu's memory; make the model smaller",
        needs=("tiny.toml",),
    ),
    # Files that are not ours.
    Case(
        "eval-out-foreign-file",
        "overwrite",
        "`eval --out victim.py`: an existing file fixedfirst did not write",
        ["eval", "run", "--out", "victim.py"],
        "--out victim.py exists and was not written by fixedfirst; nothing was written",
        needs=("run",),
        setup=victim,
    ),
    Case(
        "eval-out-directory",
        "overwrite",
        "`eval --out results` where results is a directory",
        ["eval", "run", "--out", "results"],
        "--out results is a directory; give a file name",
        needs=("run",),
        setup=victim,
    ),
    Case(
        "figure3-out-foreign-png",
        "overwrite",
        "`figure3 --out notes.png`: an existing PNG fixedfirst did not draw",
        ["figure3", "run", "--out", "notes.png"],
        "--out notes.png exists and was not written by fixedfirst",
        needs=("run",),
        setup=victim,
    ),
    Case(
        "figure3-out-unknown-format",
        "overwrite",
        "`figure3 --out f.xyz` (a format matplotlib cannot write)",
        ["figure3", "run", "--out", "f.xyz"],
        "--out f.xyz: a figure is written as .png, .pdf, .svg (the name has '.xyz')",
        needs=("run",),
    ),
    # Read-only places.
    Case(
        "eval-read-only-run",
        "read-only",
        "`eval` of a run in a read-only directory (the result goes into the run)",
        ["eval", "run"],
        "cannot write into run: Permission denied; give --out FILE to write the result",
        needs=("run",),
        read_only=("run",),
    ),
    Case(
        "eval-out-read-only",
        "read-only",
        "`eval --out ro/result.json` into a read-only directory",
        ["eval", "run", "--out", "ro/result.json", "--depths", "1"],
        "cannot write ro/result.json: Permission denied",
        needs=("run",),
        setup=read_only_dir,
        read_only=RO,
    ),
    Case(
        "figure3-read-only-run",
        "read-only",
        "`figure3` of a read-only run (the figure goes into the run)",
        ["figure3", "run"],
        "cannot write into run: Permission denied; give --out FILE to draw it elsewhere",
        needs=("run",),
        read_only=("run",),
    ),
    Case(
        "resume-read-only-run",
        "read-only",
        "`train --resume` of a read-only run",
        ["train", "--out", "run", "--resume", "--quiet"],
        "cannot write into run: Permission denied",
        needs=("run",),
        read_only=("run",),
    ),
    Case(
        "train-read-only-out",
        "read-only",
        "`train --out ro/new-run` below a read-only directory",
        ["train", "tiny.toml", "--out", "ro/new-run"],
        "cannot write to ro/new-run: Permission denied",
        needs=("tiny.toml",),
        setup=read_only_dir,
        read_only=RO,
    ),
    Case(
        "prepare-read-only-out",
        "read-only",
        "`prepare --out ro/data` below a read-only directory",
        ["prepare", "corpus.txt", "--separator", "%", "--out", "ro/data"],
        "cannot write ro/data: Permission denied",
        needs=("corpus.txt",),
        setup=read_only_dir,
        read_only=RO,
    ),
    Case(
        "export-read-only-out",
        "read-only",
        "`export --out ro/exported` below a read-only directory",
        ["export", "tokens-run", "--out", "ro/exported"],
        "cannot write ro/exported: Permission denied",
        needs=("tokens-run", "data"),
        setup=read_only_dir,
        read_only=RO,
    ),
    # One writer per run.
    Case(
        "resume-while-another-trains",
        "lock",
        "`train --resume` while another process still trains into the run",
        ["train", "--out", "run", "--resume", "--quiet"],
        "run is being written by another fixedfirst process (PID 4242, `train`)",
        needs=("run",),
        setup=another_writer_holds("run"),
    ),
    Case(
        "eval-while-another-trains",
        "lock",
        "`eval` (writing into the run) while another process trains it",
        ["eval", "run"],
        "or give --out FILE to write the result elsewhere",
        needs=("run",),
        setup=another_writer_holds("run"),
    ),
]
