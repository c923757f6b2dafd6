"""`RUN/metrics.jsonl`: one JSON object per line, appended as the run goes.

Training lines carry `"kind": "train"`, evaluation lines `"kind": "eval"`. Each checkpoint records
the file's length at the moment it was written; resuming truncates the file back to that length,
so a resumed run's metrics are exactly those of an uninterrupted one (no duplicated steps). The
file is the source of truth; TensorBoard and W&B receive each record after it (`sinks.py`).

A file shorter than the checkpoint recorded (cut by a full disk or a bad copy, or deleted) cannot
be made whole again; resuming says which records are lost, and cuts a last half line back to the
last whole one, so that the resumed run's records start on a line of their own instead of
completing a torn one (which would lose both and leave a line no reader accepts).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from fixedfirst.errors import UserError
from fixedfirst.files.paths import shown as shown_path
from fixedfirst.train.sinks import Sinks


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: write them as strings so the file stays standard JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


class MetricsLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.sinks: Sinks | None = None
        """TensorBoard / W&B (`train.log_to`): each written record goes on to them."""

    def size(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def complete_records(self) -> int:
        """Records of the file that were written whole (a killed process may leave half a line,
        which never reached a sink either)."""
        if not self.path.exists():
            return 0
        with open(self.path, "rb") as f:
            return f.read().count(b"\n")

    def truncate(self, size: int) -> None:
        if self.path.exists() and self.path.stat().st_size > size:
            with open(self.path, "r+b") as f:
                f.truncate(size)

    def resume_at(self, size: int, step: int) -> str | None:
        """Cut the file back to `size` bytes, the length the checkpoint at `step` recorded, and
        then to its last whole line; a note saying what was lost, None when nothing was."""
        shown = shown_path(self.path)
        if not self.path.exists():
            if size == 0:
                return None
            self.path.touch()
            return (
                f"note: {shown} is missing (deleted?): the records of steps 1..{step} are lost; "
                f"a new one starts at step {step + 1}"
            )
        held = self.path.stat().st_size
        self.truncate(size)
        with open(self.path, "r+b") as f:
            text = f.read()
            whole = text.rfind(b"\n") + 1
            f.truncate(whole)
        lines = text.count(b"\n")
        cut = f"cut back to its last whole line (line {lines})" if whole < len(text) else ""
        if held < size:
            torn = f" in the middle of a line: {cut}" if cut else f" after line {lines}"
            return (
                f"note: {shown} was cut short ({held:,} of the {size:,} bytes the checkpoint at "
                f"step {step} recorded){torn}; the records after it up to step {step} are lost"
            )
        if cut:
            return f"note: {shown} ended in half a line (a write stopped midway): {cut}"
        return None

    def write(self, records: list[dict[str, Any]]) -> None:
        if not records:
            return
        text = "".join(json.dumps(_clean(r)) + "\n" for r in records)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if self.sinks is not None:
            self.sinks.write(records)


def read_metrics(path: str | Path, kind: str | None = None) -> list[dict[str, Any]]:
    """All records of a metrics file, optionally only those of one kind."""
    records = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if not isinstance(record, dict):
                raise UserError(
                    f"{path}: line {number} is not a JSON metrics record (the file is "
                    "damaged); delete or repair that line"
                )
            if kind is None or record.get("kind") == kind:
                records.append(record)
    return records
