"""TensorBoard event files in RUN/tensorboard/ (`train.log_to = ["tensorboard"]`).

    tensorboard --logdir RUN/tensorboard        (or the parent of several runs)

Scalars are those of `scalars.py`, at the record's position on `train.log_axis`. TensorBoard
steps are integers, so on the FLOP axis a step counts modeled training MFLOP (10^6 FLOPs: every
training step of any model worth logging costs more, so no two records share a step, and 2^63
MFLOP is far beyond any budget). A custom-scalars layout draws the NLL at every serving depth in
one chart. Events are flushed after every batch of records, so an interrupted run loses none it
wrote to metrics.jsonl.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fixedfirst.runs.directory import TENSORBOARD_DIR
from fixedfirst.train.scalars import scalars

MFLOP = 1e6


def axis_value(record: dict[str, Any], axis: str) -> int:
    if axis == "flops":
        return round(record["flops"] / MFLOP)
    return int(record[axis])


class TensorBoardSink:
    def __init__(self, run: Path, axis: str) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.directory = Path(run) / TENSORBOARD_DIR
        self.axis = axis
        self.history = self.directory.is_dir() and any(
            p.name.startswith("events.out.tfevents") for p in self.directory.iterdir()
        )
        self.writer = SummaryWriter(str(self.directory))
        if not self.history:
            layout = {"eval": {"NLL by serving depth": ["Multiline", [r"eval/nll_depth_\d+"]]}}
            self.writer.add_custom_scalars(layout)
            self.writer.flush()

    def has_history(self) -> bool:
        return self.history

    def write(self, records: list[dict[str, Any]]) -> None:
        for record in records:
            step = axis_value(record, self.axis)
            for tag, value in scalars(record).items():
                self.writer.add_scalar(tag, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
