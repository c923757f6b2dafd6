"""Ctrl-C during training: finish the step, save a checkpoint, say how to resume.

The first SIGINT only sets a flag: the trainer stops at the next step boundary (under torchrun,
at the next log line, where the ranks agree on rank 0's flag), writes a checkpoint atomically
like any other and raises `TrainingInterrupted`, whose message is the exact command that
continues the run. A second SIGINT restores the default handler and interrupts at once: the
previous checkpoint is intact either way (docs/design.md §7).
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType, TracebackType


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped on Ctrl-C after saving a checkpoint; the message says how to resume."""


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

    def __enter__(self) -> Interrupt:
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
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False
