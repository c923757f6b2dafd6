"""Ctrl-C during training: finish the step, save a checkpoint, say how to resume.

The first SIGINT only sets a flag: the trainer stops at the next step boundary (under torchrun,
at the next log line, where the ranks agree on rank 0's flag), writes a checkpoint atomically
like any other and raises `TrainingInterrupted`, whose message is the exact command that
continues the run. A second SIGINT restores the default handler and interrupts at once: the
previous checkpoint is intact either way (docs/design.md §7).
"""

from __future__ import annotations

import shlex
import signal
import sys
import threading
from pathlib import Path
from types import FrameType, TracebackType

from fixedfirst.train.distributed import World, broadcast_object


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped on Ctrl-C after saving a checkpoint; the message says how to resume."""


_stop_requested = False
_active: Interrupt | None = None


def request_stop(signum: int | None = None, frame: FrameType | None = None) -> None:
    """A stop asked for from outside the training loop (a worker's parent process, or a Ctrl-C
    that came before training began): like a first Ctrl-C, never a second, however often it
    comes. Usable as a signal handler."""
    global _stop_requested
    _stop_requested = True
    if _active is not None:
        _active.requested = True


class Interrupt:
    """A context manager that turns the first Ctrl-C into a request (`requested`)."""

    def __init__(self, announce: bool = True) -> None:
        self.requested = False
        self.announce = announce
        self._previous = None
        self._installed = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:  # the second Ctrl-C: stop now
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        self.requested = True
        if self.announce:
            print(
                "stopping after this step to save a checkpoint (Ctrl-C again to stop at once)",
                file=sys.stderr,
                flush=True,
            )

    def agreed(self, world: World, at_log_line: bool) -> bool:
        """Whether to stop here: at any step in one process; under torchrun only where the
        ranks meet anyway (a log line), on rank 0's word, so they all stop at the same step."""
        if not world.launched:
            return self.requested
        return at_log_line and broadcast_object(world, self.requested)

    def __enter__(self) -> Interrupt:
        global _active
        self.requested = self.requested or _stop_requested
        _active = self
        # Signal handlers belong to the main thread; elsewhere Ctrl-C keeps its default.
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        global _active
        _active = None
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False


def resume_command(run: Path, world_size: int) -> str:
    """The command line that continues the run in `run`."""
    nproc = f" --nproc {world_size}" if world_size > 1 else ""
    return f"fixedfirst train --resume --out {shlex.quote(str(run))}{nproc}"
