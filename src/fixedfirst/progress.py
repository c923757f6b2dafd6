"""Progress display for long work: a live bar on a terminal, plain lines in logs, or nothing.

On a terminal (stderr is a TTY) a tqdm bar shows how far the work is, the caller's short fields
(step, phase, depth, loss, tok/s, ...) and the ETA. Redirected to a file or a CI log, the same
facts are printed as a plain line every 5% of the steps or 30 seconds, whichever comes first.
`quiet` prints nothing.

The ETA follows the work, not the step count, when the caller says what the work is
(`work_total`): a fixed-first run's finishing steps cost about four times its K0 = 2 steps, so an
ETA from the step rate of the fixed stage would be far too optimistic after the switch. The
trainer passes modeled FLOPs, which the wall-clock follows (see benchmarks/wallclock_savings.py).
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from tqdm import tqdm


def _eta(seconds: float) -> str:
    seconds = int(max(0, seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    def __init__(
        self,
        total: int,
        initial: int = 0,
        quiet: bool = False,
        stream: TextIO | None = None,
        description: str = "train",
        work_total: float | None = None,
        work_initial: float = 0.0,
    ) -> None:
        """total/initial: steps; work_total/work_initial: the same progress in units of work
        (e.g. modeled FLOPs) when steps differ in cost, which then drives the bar and the ETA."""
        self.total = total
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.description = description
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.every = max(1, total // 20)
        self.start = time.monotonic()
        self.start_step = initial
        self.work_total = work_total
        self.start_work = work_initial
        self.last_print = self.start
        self.bar = None
        if not quiet and self.tty:
            if work_total is None:
                self.bar = tqdm(
                    total=total,
                    initial=initial,
                    file=self.stream,
                    desc=description,
                    unit="step",
                    dynamic_ncols=True,
                )
            else:
                self.bar = tqdm(
                    total=work_total,
                    initial=work_initial,
                    file=self.stream,
                    desc=description,
                    dynamic_ncols=True,
                    bar_format="{desc} {percentage:3.0f}%|{bar}| {postfix} [{elapsed}<{remaining}]",
                )

    def eta_seconds(self, step: int, work: float | None, now: float) -> float | None:
        """Seconds left at the rate of this invocation so far (None before any progress)."""
        elapsed = max(now - self.start, 1e-9)
        if self.work_total is not None and work is not None:
            done, left = work - self.start_work, self.work_total - work
        else:
            done, left = step - self.start_step, self.total - step
        if done <= 0:
            return None
        return left / (done / elapsed)

    def update(self, step: int, fields: dict[str, str], work: float | None = None) -> None:
        """`step` = steps completed; `work` = work completed (when `work_total` was given);
        `fields` = short labelled values to show."""
        if self.quiet:
            return
        if self.bar is not None:
            if self.work_total is not None and work is not None:
                self.bar.n = work
                fields = {"step": f"{step}/{self.total}", **fields}
            else:
                self.bar.n = step
            self.bar.set_postfix(fields, refresh=False)
            self.bar.refresh()
            return
        now = time.monotonic()
        if step == self.total or step % self.every == 0 or now - self.last_print > 30:
            self.last_print = now
            eta = self.eta_seconds(step, work, now)
            text = "  ".join(f"{k} {v}" for k, v in fields.items())
            print(
                f"{self.description} {step}/{self.total}  {text}  "
                f"eta {'?' if eta is None else _eta(eta)}",
                file=self.stream,
            )
            self.stream.flush()

    def write(self, line: str) -> None:
        """A message that must not be torn by the bar."""
        if self.quiet:
            return
        if self.bar is not None:
            self.bar.write(line, file=self.stream)
        else:
            print(line, file=self.stream)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class Ticker:
    """Progress lines for work that may be quick or long (an evaluation at depth 1000, a
    recall sweep): silent for its first `after` seconds, then a line on stderr every `every`
    seconds with how far it is and the time left, so nothing runs for minutes without a word."""

    def __init__(
        self,
        description: str,
        quiet: bool = False,
        after: float = 5.0,
        every: float = 10.0,
        stream: TextIO | None = None,
    ) -> None:
        self.description = description
        self.quiet = quiet
        self.after = after
        self.every = every
        self.stream = stream or sys.stderr
        self.start = time.monotonic()
        self.last: float | None = None

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        elapsed = now - self.start
        if self.quiet or elapsed < self.after or done >= total:
            return
        if self.last is not None and now - self.last < self.every:
            return
        self.last = now
        eta = elapsed / max(done, 1) * (total - done)
        print(
            f"{self.description}: {done}/{total}, {_eta(elapsed)} so far, eta {_eta(eta)}",
            file=self.stream,
            flush=True,
        )
