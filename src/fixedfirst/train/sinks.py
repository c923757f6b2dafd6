"""Where metrics go besides RUN/metrics.jsonl: TensorBoard and Weights & Biases (`train.log_to`).

metrics.jsonl stays the source of truth: every record is written there first and then handed,
unchanged, to each sink, which logs its scalars (`scalars.py`) at the record's position on the
run's axis (`train.log_axis`: step, tokens or modeled FLOPs).

Resuming. A resumed run truncates metrics.jsonl back to its checkpoint and produces the records
after it again, the same records but for what the clock measures (a step's depth, data and
initial state are pure functions of the seed and the step, docs/design.md §7): a sink that
received them before the interruption skips exactly as many records as were cut from the file,
so its curves continue without a duplicated step, keeping the first tok/s, MFU and wall-clock.
A sink newly added on resume (no event files or W&B run yet) first receives the records the file
keeps, so its curves start at step 1 too.

The sinks' packages are optional extras; `check_packages` refuses a missing one in one line
before the run directory is touched.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from fixedfirst.config import RunConfig
from fixedfirst.errors import UserError

EXTRAS = {"tensorboard": "tensorboard", "wandb": "wandb"}
"""log_to name (also the package it imports) -> the extra of fixedfirst that installs it."""


class Sink(Protocol):
    def has_history(self) -> bool:
        """Whether records of this run went to this sink before (a resumed run)."""

    def write(self, records: list[dict[str, Any]]) -> None: ...

    def close(self) -> None: ...


def check_packages(log_to: Sequence[str]) -> None:
    for name in log_to:
        if importlib.util.find_spec(name) is None:
            raise UserError(
                f"train.log_to = {log_to!r} needs the {name} package: "
                f"pip install 'fixedfirst[{EXTRAS[name]}]' (or pip install {name})"
            )


class Sinks:
    """The run's sinks, each told how many of the coming records it has already received."""

    def __init__(self, sinks: list[Sink]) -> None:
        self.sinks = sinks
        self.skip = [0] * len(sinks)

    def resume(self, kept: list[dict[str, Any]], written_before: int) -> None:
        """`kept`: the records metrics.jsonl keeps after the resume truncated it; `written_before`:
        how many complete records it held before (all of them went to the sinks then)."""
        for i, sink in enumerate(self.sinks):
            if sink.has_history():
                self.skip[i] = max(0, written_before - len(kept))
            elif kept:
                sink.write(kept)

    def write(self, records: list[dict[str, Any]]) -> None:
        for i, sink in enumerate(self.sinks):
            n = min(self.skip[i], len(records))
            self.skip[i] -= n
            if records[n:]:
                sink.write(records[n:])

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def open_sinks(config: RunConfig, run: Path, quiet: bool = False) -> Sinks:
    """The sinks `train.log_to` names, started on the run directory."""
    sinks: list[Sink] = []
    for name in config.train.log_to:
        if name == "tensorboard":
            from fixedfirst.train.tensorboard_sink import TensorBoardSink

            sinks.append(TensorBoardSink(run, config.train.log_axis))
        else:
            from fixedfirst.train.wandb_sink import WandbSink

            sinks.append(WandbSink(run, config, quiet))
    return Sinks(sinks)
