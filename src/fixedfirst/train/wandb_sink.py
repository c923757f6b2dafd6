"""Weights & Biases (`train.log_to = ["wandb"]`), files in RUN/wandb/.

W&B's own environment variables apply: WANDB_MODE=offline logs without an account or a network
(`wandb sync RUN/wandb/offline-run-*` uploads later), WANDB_PROJECT names the project (default
"fixedfirst"), WANDB_ENTITY the team. The W&B run is named after the run directory and carries
the resolved configuration; its id is kept in RUN/wandb-run-id, so a resumed run (`--resume`)
continues the same W&B run, online or offline.

Rows are logged at W&B step = training step, and every chart uses `progress/step`,
`progress/tokens` or `progress/flops` as its x-axis (`train.log_axis`; W&B takes a float axis, so
FLOPs are plain FLOPs here). Scalars are those of `scalars.py`.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from fixedfirst.config import RunConfig
from fixedfirst.errors import UserError
from fixedfirst.runs.directory import WANDB_ID_FILE
from fixedfirst.train.scalars import scalars

DEFAULT_PROJECT = "fixedfirst"


class WandbSink:
    def __init__(self, run: Path, config: RunConfig, quiet: bool = False) -> None:
        import wandb

        run = Path(run)
        id_file = run / WANDB_ID_FILE
        self.history = id_file.is_file()
        run_id = id_file.read_text().strip() if self.history else uuid.uuid4().hex[:16]
        try:
            self.run = wandb.init(
                project=os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT,
                name=run.resolve().name,
                id=run_id,
                resume="allow",
                dir=str(run),
                config=config.to_dict(),
                reinit="create_new",
                settings=wandb.Settings(console="off", silent=quiet),
            )
        except Exception as e:  # wandb raises many kinds (no login, no network, bad settings)
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError(
                f"Weights & Biases did not start ({first}); run `wandb login`, or set "
                "WANDB_MODE=offline to log without an account"
            ) from None
        if not self.history:
            id_file.write_text(run_id + "\n")
        axis = f"progress/{config.train.log_axis}"
        self.run.define_metric(axis)
        for group in ("train/*", "eval/*"):
            self.run.define_metric(group, step_metric=axis)

    def has_history(self) -> bool:
        return self.history

    def write(self, records: list[dict[str, Any]]) -> None:
        for record in records:
            row = {
                "progress/step": record["step"],
                "progress/tokens": record["tokens"],
                "progress/flops": record["flops"],  # an evaluation's row needs its axis too
                **scalars(record),
            }
            self.run.log(row, step=int(record["step"]))

    def close(self) -> None:
        self.run.finish()
