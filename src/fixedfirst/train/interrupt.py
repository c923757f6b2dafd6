"""Stopping a run cleanly: Ctrl-C, and the signals a scheduler sends before it kills a job.

SIGINT (Ctrl-C), SIGTERM (what SLURM and Kubernetes send to preempt a job, some seconds before
SIGKILL) and SIGUSR1 (what `sbatch --signal` can send ahead of the time limit) only set a flag:
the trainer stops at the next step boundary (under torchrun, at the next log line, where the
ranks agree on rank 0's flag), writes a checkpoint atomically like any other and raises
`TrainingInterrupted`. Its message is the exact command that continues the run; its exit status
says why it stopped: 130 after Ctrl-C, REQUEUE_STATUS after SIGTERM or SIGUSR1, a status a
scheduler can be told to requeue on (docs/guides/distributed.md). A second Ctrl-C restores the
default handler and interrupts at once; SIGTERM and SIGUSR1 never do, however often they come (a
scheduler may send them to every process, and its SIGKILL is the deadline). The previous
checkpoint is intact either way (docs/design.md §7).
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType, TracebackType

from fixedfirst.train.distributed import World, broadcast_object

STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGUSR1") if hasattr(signal, name)
)
"""The signals that stop a run at the next step boundary (SIGUSR1 where the platform has it)."""

INTERRUPT_STATUS = 130
"""Exit status after Ctrl-C (128 + SIGINT, what a shell reports for an interrupted command)."""

REQUEUE_STATUS = 75
"""Exit status after SIGTERM or SIGUSR1, once the checkpoint is saved: EX_TEMPFAIL of
sysexits.h, "a temporary failure; try again". Neither success (0: the run is not finished) nor a
death by signal (143), so a scheduler can be told to requeue exactly these jobs, whose next
start resumes (SLURM: `scontrol requeue` in the job script or RequeueExit=75; Kubernetes: a pod
failure policy on exit code 75)."""


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped on a stop signal after saving a checkpoint; the message says how to
    resume, `exit_status` how the process ends."""

    def __init__(self, message: str = "", signum: int = signal.SIGINT) -> None:
        super().__init__(message)
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return INTERRUPT_STATUS if self.signum == signal.SIGINT else REQUEUE_STATUS

    @property
    def reason(self) -> str:
        """'interrupted' (Ctrl-C) or 'stopped by SIGTERM' (a scheduler's signal)."""
        if self.signum == signal.SIGINT:
            return "interrupted"
        return f"stopped by {signal.Signals(self.signum).name}"


_stop_requested: int | None = None
"""The signal of a stop asked for before training began (kept for the run that starts)."""
_active: Interrupt | None = None


def request_stop(signum: int | None = None, frame: FrameType | None = None) -> None:
    """A stop asked for from outside the training loop (a worker's parent process, or a signal
    that came before training began): like a first Ctrl-C, never a second, however often it
    comes. Usable as a signal handler; `signum` (SIGINT when not given) is why it stops."""
    global _stop_requested
    reason = signal.SIGINT if signum is None else signum
    if _stop_requested is None:
        _stop_requested = reason
    if _active is not None and not _active.signum:
        _active.signum = reason


@contextlib.contextmanager
def scheduler_signals(handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    """While inside, SIGTERM and SIGUSR1 (a scheduler's signals) call `handler` (main thread
    only: elsewhere signals cannot be handled); the previous handlers come back on leaving."""
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in STOP_SIGNALS:
            if signum != signal.SIGINT:
                previous[signum] = signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


@contextlib.contextmanager
def stop_requests_kept() -> Iterator[None]:
    """While inside, SIGTERM and SIGUSR1 are stop requests (`request_stop`), also before a run
    starts training: a job preempted while it sets up still stops cleanly, after its first step.
    The previous handlers come back on leaving, and a request made inside is forgotten."""
    global _stop_requested
    try:
        with scheduler_signals(request_stop):
            yield
    finally:
        _stop_requested = None


class Interrupt:
    """A context manager that turns the first stop signal into a request (`signum`)."""

    def __init__(self, announce: bool = True) -> None:
        self.signum: int | None = None
        """The first stop signal received (None: keep training)."""
        self.announce = announce
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return bool(self.signum)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT and self.requested:  # a second Ctrl-C: stop now
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        if self.requested:  # SIGTERM or SIGUSR1 again: still the first request
            return
        self.signum = signum
        if self.announce:
            if signum == signal.SIGINT:
                why, again = "", " (Ctrl-C again to stop at once)"
            else:
                why, again = f"{signal.Signals(signum).name}: ", ""
            print(
                f"{why}stopping after this step to save a checkpoint{again}",
                file=sys.stderr,
                flush=True,
            )

    def agreed(self, world: World, at_log_line: bool) -> int | None:
        """The stop signal when the run stops here, else None: at any step in one process;
        under torchrun only where the ranks meet anyway (a log line), on rank 0's word, so they
        all stop at the same step and give the same reason (then `signum` here)."""
        if not world.launched:
            return self.signum or None
        if not at_log_line:
            return None
        agreed = broadcast_object(world, self.signum or None)
        if agreed is not None:
            self.signum = agreed
        return agreed

    def stopped(self, checkpoint: str, run: Path, world_size: int) -> TrainingInterrupted:
        """What the trainer raises once it saved `checkpoint` on the agreed stop signal."""
        resume = resume_command(run, world_size)
        reason = self.signum or signal.SIGINT
        return TrainingInterrupted(f"saved {checkpoint}; resume with `{resume}`", reason)

    def __enter__(self) -> Interrupt:
        global _active
        self.signum = self.signum or _stop_requested
        _active = self
        # Signal handlers belong to the main thread; elsewhere the signals keep their handlers.
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        global _active
        _active = None
        for signum, previous in self._previous.items():
            # `previous` is what signal.signal returned for this signal, kept as an object
            signal.signal(signum, previous)  # type: ignore[arg-type]
        self._previous.clear()


def resume_command(run: Path, world_size: int) -> str:
    """The command line that continues the run in `run`."""
    nproc = f" --nproc {world_size}" if world_size > 1 else ""
    return f"fixedfirst train --resume --out {shlex.quote(str(run))}{nproc}"
