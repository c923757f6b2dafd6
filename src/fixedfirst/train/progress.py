"""Progress display for long work: a live bar on a terminal, plain lines in logs, or nothing.

On a terminal (stderr is a TTY) a tqdm bar shows step/total, phase, depth, loss, tok/s, FLOPs spent
against the budget and the ETA. Redirected to a file or a CI log, the same facts are printed as a
plain line every `every` steps or 30 seconds, whichever comes first. `quiet` prints nothing.
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
    ) -> None:
        self.total = total
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.description = description
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.every = max(1, total // 20)
        self.start = time.monotonic()
        self.start_step = initial
        self.last_print = self.start
        self.bar = None
        if not quiet and self.tty:
            self.bar = tqdm(
                total=total,
                initial=initial,
                file=self.stream,
                desc=description,
                unit="step",
                dynamic_ncols=True,
            )

    def update(self, step: int, fields: dict[str, str]) -> None:
        """`step` = steps completed; `fields` = short labelled values to show."""
        if self.quiet:
            return
        if self.bar is not None:
            self.bar.n = step
            self.bar.set_postfix(fields, refresh=False)
            self.bar.refresh()
            return
        now = time.monotonic()
        if step == self.total or step % self.every == 0 or now - self.last_print > 30:
            self.last_print = now
            done = step - self.start_step
            rate = done / max(now - self.start, 1e-9)
            eta = _eta((self.total - step) / rate) if rate > 0 else "?"
            text = "  ".join(f"{k} {v}" for k, v in fields.items())
            print(f"{self.description} {step}/{self.total}  {text}  eta {eta}", file=self.stream)
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
