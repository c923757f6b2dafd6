"""`diagnose`: the update diagnostic over the first finishing updates of a fixed-first run.

For each u in `updates` the run is continued in memory from its switch checkpoint by u of its own
finishing steps, and B update pairs (`update_pair`) are measured there on the same B training
batches, taken from the stream after the last finishing step used, so the comparison across u
is paired and no measured batch is one of the u updates. docs/design.md §6 gives the procedure,
the intervals (`summary`) and what it costs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fixedfirst.errors import UserError
from fixedfirst.model.loss import IGNORE_INDEX
from fixedfirst.progress import Progress
from fixedfirst.runs.checkpoint import SWITCH_TAG
from fixedfirst.schedules import describe
from fixedfirst.studies.diagnose.finishing import FinishingChain, open_run_state
from fixedfirst.studies.diagnose.summary import (
    IntervalSettings,
    Measurements,
    contained_from,
    depth_bands,
    first_u_containing_zero,
)
from fixedfirst.studies.diagnose.update_pair import (
    RMS_REFERENCES,
    UpdatePair,
    pair_row_seeds,
    stack_batches,
)

DEFAULT_UPDATES = (0, 1, 2, 4, 8, 16, 32)
MIN_RESAMPLES = 100
"""Fewer resamples than this leave a 95% percentile interval's ends resting on 2-3 draws."""

RMS_REFERENCE_DESCRIPTIONS = {
    "geometric-mean": "both updates rescaled to sqrt(RMS(shallow) * RMS(deep)), the geometric "
    "mean of their raw RMSs",
    "shallow": "both updates rescaled to the RMS of the shallow (depth-a) update",
    "deep": "both updates rescaled to the RMS of the deep (depth-b) update",
}


@dataclass
class DiagnoseOptions:
    updates: list[int] = field(default_factory=lambda: list(DEFAULT_UPDATES))
    """Numbers of finishing updates after the checkpoint at which pairs are measured."""
    batches: int = 32
    """Training batches (paired measurements) per u; at least 2 for an interval."""
    depths: tuple[int, int] = (4, 16)
    """(shallow, deep): Benefit = NLL after the shallow update - NLL after the deep one."""
    serving_depths: list[int] = field(default_factory=lambda: list(range(1, 17)))
    """Depths at which the held-out NLL is measured; the depth average is over these."""
    checkpoint: str = SWITCH_TAG
    """The checkpoint to start from: a tag or a step number."""
    heldout: int = 32
    """Sequences in the fixed held-out set: the run's first `heldout` validation sequences,
    evaluated as one batch. Each pair evaluates it twice to the deepest serving depth; at 64
    sequences of the small preset that was 44% of the run time, at 32 about a quarter."""
    rms_reference: str = "geometric-mean"
    """The common RMS of the two updates: geometric-mean, shallow or deep."""
    level: float = 0.95
    """Confidence level of the intervals."""
    resamples: int = 2000
    """Bootstrap resamples per interval."""
    seed: int = 0
    """Seed of the pair updates' initial-state draws (the finishing steps use the run's own)
    and of the bootstrap's draws."""
    device: str = "auto"
    data: str | None = None
    """Where the run's data is now, when it moved from its data.path (--data)."""

    def __post_init__(self) -> None:
        self.updates = sorted(set(self.updates))
        if not self.updates or self.updates[0] < 0:
            raise UserError(f"--updates must be integers >= 0, got {self.updates}")
        if self.batches < 2:
            raise UserError(f"--batches must be >= 2 (an interval needs 2), got {self.batches}")
        if len(self.depths) != 2 or min(self.depths) < 1:
            raise UserError(f"--depths must be two depths >= 1, got {self.depths}")
        if not self.serving_depths or min(self.serving_depths) < 1:
            raise UserError(f"--serving-depths must be depths >= 1, got {self.serving_depths}")
        if self.heldout < 2:
            raise UserError(
                f"--heldout must be >= 2 sequences (the intervals resample them), got "
                f"{self.heldout}"
            )
        if self.rms_reference not in RMS_REFERENCES:
            raise UserError(
                f"--rms-reference must be one of {', '.join(RMS_REFERENCES)}, "
                f"got {self.rms_reference!r}"
            )
        if not 0.0 < self.level < 1.0:
            raise UserError(f"--level must be in (0, 1), got {self.level}")
        if self.resamples < MIN_RESAMPLES:
            raise UserError(f"--resamples must be >= {MIN_RESAMPLES}, got {self.resamples}")


@dataclass
class Diagnosis:
    """What `run_diagnostic` measured: the summary (results.json) and the raw per-sequence
    benefits behind its intervals, too large for JSON."""

    results: dict[str, Any]
    benefit_per_sequence: np.ndarray
    """(updates, batches, held-out sequences, serving depths), in nats per token."""


def run_diagnostic(
    run: str | Path,
    options: DiagnoseOptions | None = None,
    quiet: bool = False,
    record_digests: bool = False,
) -> Diagnosis:
    """Measure the update diagnostic on `run`: the results (the `results.json` content) and the
    per-sequence benefits.

    record_digests: also hash the model and optimizer state right before every update and keep
    the pairs of digests (a check that both updates start from bit-identical states).
    """
    o = options or DiagnoseOptions()
    started = time.perf_counter()
    state = open_run_state(run, o.checkpoint, o.device, data=o.data)
    config, train = state.config, state.config.train
    max_u = o.updates[-1]
    if max_u >= state.remaining_steps:
        raise UserError(
            f"--updates {max_u} is beyond the run: the run has {state.total_steps} steps, "
            f"{state.remaining_steps} after step {state.step}, and the pairs at u need the "
            f"run's step {state.step} + u to exist; use updates <= {state.remaining_steps - 1} "
            "(they are refused rather than clipped, so a result never means something else)"
        )

    # Data: first the run's own batches for the finishing steps, then the diagnostic's batches.
    data_started = time.perf_counter()
    chain_batches = [state.source.next_batch(train.batch_size) for _ in range(max_u)]
    pair_batches = [
        state.source.next_batch(train.batch_size).to(state.device) for _ in range(o.batches)
    ]
    heldout = stack_batches(state.source.validation_batches(1, o.heldout)).to(state.device)
    data_seconds = time.perf_counter() - data_started
    sequences = int(heldout.inputs.shape[0])
    tokens_per_sequence = (heldout.targets != IGNORE_INDEX).sum(dim=1).tolist()
    scored = sum(1 for n in tokens_per_sequence if n > 0)
    if scored < 2:
        raise UserError(
            f"the run's validation data gave {sequences} held-out sequence(s), {scored} with "
            "scored targets; the intervals resample held-out sequences and need at least 2: "
            "give the run more validation data"
        )
    settings = IntervalSettings(o.level, o.resamples, o.seed)
    benefit_per_sequence = np.empty((len(o.updates), o.batches, sequences, len(o.serving_depths)))

    chain = FinishingChain(state)
    bands = depth_bands(o.serving_depths, *o.depths)
    progress = Progress(max_u + len(o.updates) * o.batches, quiet=quiet, description="diagnose")
    done, chain_seconds = 0, 0.0
    seconds = {"updates": 0.0, "evaluation": 0.0}
    rows: list[dict[str, Any]] = []
    digests: list[tuple[str, str]] = []
    try:
        for index, u in enumerate(o.updates):
            while chain.step < state.step + u:
                t0 = time.perf_counter()
                record = chain.advance(chain_batches[chain.step - state.step])
                chain_seconds += time.perf_counter() - t0
                done += 1
                progress.update(done, {"finishing step": str(record.step), "K": str(record.depth)})
            lr = chain.lr(chain.step)
            pair = UpdatePair(
                state.model,
                state.optimizer,
                train,
                heldout,
                o.serving_depths,
                o.depths,
                o.rms_reference,  # type: ignore[arg-type]  # one of RMS_REFERENCES: checked above
                state.dtype,
                record_digests,
            )
            measured = Measurements(o.batches, sequences, o.serving_depths)
            with pair:
                for i, batch in enumerate(pair_batches):
                    seeds = pair_row_seeds(o.seed, i, batch.inputs.shape[0])
                    result = pair.measure(batch, lr, seeds)
                    measured.add(i, result)
                    if result.start_digests is not None:
                        digests.append(result.start_digests)
                    done += 1
                    progress.update(
                        done,
                        {
                            "u": str(u),
                            "batch": f"{i + 1}/{o.batches}",
                            "mean benefit": f"{measured.per_batch_benefit(i + 1).mean():+.2e}",
                        },
                    )
            for key in seconds:
                seconds[key] += pair.seconds[key]
            assert pair.baseline is not None
            row = {"u": u, "step": chain.step, "lr": lr}
            row.update(measured.summary(pair.baseline, bands, settings))
            rows.append(row)
            benefit_per_sequence[index] = measured.benefit
    finally:
        progress.close()

    shallow, deep = o.depths
    ckpt = state.checkpoint
    results: dict[str, Any] = {
        "run": str(Path(run)),
        "schedule": describe(config.schedule),
        "checkpoint": {"step": ckpt.step, "tags": ckpt.tags, "path": str(ckpt.path)},
        "switch_step": state.schedule.switch_step(state.total_steps),
        "total_steps": state.total_steps,
        "depths": {"shallow": shallow, "deep": deep},
        "benefit": (
            f"NLL after the depth-{shallow} update minus NLL after the depth-{deep} update "
            f"(nats/token, held-out); positive favours depth {deep}"
        ),
        "serving_depths": list(o.serving_depths),
        "updates": list(o.updates),
        "batches": o.batches,
        "batch_size": train.batch_size,
        "heldout": {
            "sequences": sequences,
            "tokens": heldout.scored_tokens,
            "tokens_per_sequence": tokens_per_sequence,
        },
        "per_sequence": {
            "axes": ["u", "batch", "held-out sequence", "serving depth"],
            "shape": list(benefit_per_sequence.shape),
            "what": "benefit per held-out sequence: mean over its scored tokens, nats/token",
        },
        "rms_reference": o.rms_reference,
        "rms_reference_description": RMS_REFERENCE_DESCRIPTIONS[o.rms_reference],
        "interval": settings.describe(),
        "seed": o.seed,
        "device": str(state.device),
        "finishing_steps": [vars(s) for s in chain.history],
        "first_u_contains_zero": first_u_containing_zero(rows),
        "contains_zero_from_u": contained_from(rows),
        "bands": {name: list(depths) for name, depths in bands.items()},
        "contains_zero_from_u_by_band": {name: contained_from(rows, name) for name in bands},
        "timing": {
            "total_s": time.perf_counter() - started,
            "data_s": data_seconds,
            "finishing_steps_s": chain_seconds,
            "pair_updates_s": seconds["updates"],
            "heldout_evaluation_s": seconds["evaluation"],
            "torch_threads": torch.get_num_threads(),
        },
        "results": rows,
    }
    if record_digests:
        results["start_digests"] = [list(d) for d in digests]
    return Diagnosis(results, benefit_per_sequence)
