"""The training loop: one depth per optimizer step from the schedule, budgets, checkpoints, metrics.

A run is planned before its first step (the budget fixes every step's depth, learning rate and
phase) and followed step by step through `DepthScheduler`, as any loop follows a plan, which also
decides an auto switch (docs/design.md §14); each step is `train.step`'s, and everything a resume
needs is in each checkpoint, so a resumed run computes what the run straight through computes
(§7-8). The loop (`_train`) reads in one glance: `_step` trains a step and returns its
record, `_boundary_after` says what is due after it (a log line, checkpoint tags, an evaluation,
the auto switch's check, a stop), `_log` and `_cross` do it. Only rank 0 writes the run.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch

from fixedfirst.compute.memory import deepest_depth
from fixedfirst.config import RunConfig
from fixedfirst.data.prefetch import DeviceBatches
from fixedfirst.data.source import BatchSource, rank_rows
from fixedfirst.errors import UserError
from fixedfirst.evaluation.nll import mean_serving_nll, run_eval_dtypes
from fixedfirst.files.writing import write_json_atomic
from fixedfirst.machine.device import choose_threads, run_peak_flops
from fixedfirst.model.kinds import build_run_model, foreign_model_note
from fixedfirst.progress import Progress
from fixedfirst.runs.checkpoint import SWITCH_TAG, Checkpoint, CheckpointManager
from fixedfirst.runs.directory import RunDir, config_record
from fixedfirst.schedules import describe
from fixedfirst.scheduling.depth_scheduler import DepthScheduler
from fixedfirst.train import compilation, distributed, memory_check, warm_up
from fixedfirst.train.auto_switch import META_KEY, decision_records, scheduler_state, switch_summary
from fixedfirst.train.checkpoint_writes import CheckpointWrites, live_storages
from fixedfirst.train.counters import Counters
from fixedfirst.train.distributed import on_main
from fixedfirst.train.garbage import CollectAtBoundaries
from fixedfirst.train.interrupt import Interrupt
from fixedfirst.train.metrics import MetricsLog, read_metrics
from fixedfirst.train.optim import build_optimizer, lr_at
from fixedfirst.train.parallel import ParallelModel
from fixedfirst.train.preflight import preflight
from fixedfirst.train.resume import check_same_config, check_trainer_state, load_full_state
from fixedfirst.train.sinks import open_sinks
from fixedfirst.train.step import StepContext, host_values, state_seeds, train_step


class Trainer:
    def __init__(
        self,
        config: RunConfig,
        out: str,
        resume: bool = False,
        quiet: bool = False,
        force: bool = False,
    ) -> None:
        # Everything that can be refused is checked before the run directory is touched.
        checked = preflight(config)
        self.config = config = checked.config
        self.run = RunDir(out)
        self.quiet = quiet
        self.world = checked.world
        self.rank, self.world_size = self.world.rank, self.world.world_size
        self.is_main = self.world.is_main
        # The run's plan, followed step by step, and its auto switch (no depth handle: our model
        # takes the depth as `train_step`'s argument).
        self.scheduler = DepthScheduler(checked.plan)
        self.device, self.dtype = checked.device, checked.dtype
        self.memory_placement = checked.memory
        self.source: BatchSource = checked.source
        self.batches = DeviceBatches(
            self.source, config.train.batch_size, self.rank, self.world_size, self.device
        )
        self.val_batches = checked.val_batches
        self.probe = checked.probe
        self.given_peak = checked.given_peak

        distributed.start(self.world, self.device)
        # Under torchrun one process per machine reads the shards' checksums (the processes of
        # a machine read the same files); the others take its word.
        if self.world.launched:
            ran = distributed.once_per_machine(self.world, self.source.check_training_data)
            if not ran:
                self.source.training_data_checked()
        # One writer per run (rank 0 holds the lock); released when training returns or fails.
        restart = on_main(self.world, lambda: self.run.open_for_writing(config, resume, force))
        try:
            self._prepare(resume, restart)
        except BaseException:
            self.run.close()
            raise

    def _prepare(self, resume: bool, restart: bool) -> None:
        """Build the model and optimizer; resume from a checkpoint or start (over) afresh."""
        config, t = self.config, self.config.train
        # Threads before anything is timed: the peak (and so MFU) is measured with them.
        self.threads, threads_why = choose_threads(t.threads, self.world.local_world_size)
        torch.set_num_threads(self.threads)
        self.peak_per_process, self.peak_from = run_peak_flops(
            self.device.type, self.dtype, self.given_peak
        )
        peak = self.peak_flops = self.peak_per_process * self.world_size
        model = build_run_model(config).to(self.device)  # the same weights on every rank
        self.compiled = compilation.decide(
            t.compile, self.device, self.scheduler.plan.flops, peak, model.never_compiled
        )
        how = "compiled" if self.compiled.compile else "eager"
        self.precision = "bf16" if self.dtype == torch.bfloat16 else "fp32"
        self.eval_dtypes = run_eval_dtypes(self.device, self.dtype)
        note = foreign_model_note(config.model)
        if note is not None:
            self._say(note)
        self._say(f"data: {self.source.describe()}")
        self._say(
            f"{self.threads} thread(s) ({threads_why}); {how} ({self.compiled.reason}); "
            f"{self.precision} (train.precision = {t.precision}); "
            f"MFU against {self.peak_flops:.3g} FLOP/s ({self.peak_from})"
        )

        if self.compiled.compile:
            model.compile_loop()
        self.parallel = ParallelModel(model, self.world, t.strategy, self.device, self.dtype)
        self.model = self.parallel.module
        # After sharding: FSDP2 replaces the parameters by sharded ones.
        self.optimizer = build_optimizer(self.model, t, fused=self.device.type == "cuda")
        self.step_context = StepContext(self.parallel, self.optimizer, t, self.dtype)
        # Before step 0, the weights and AdamW untouched: every compiled graph built, and on a
        # GPU the deepest step measured and refused if it does not fit (train/warm_up.py).
        self.deepest = warm_up.warm_up(
            self.step_context,
            deepest_depth(self.scheduler.plan),
            t.seq_len,
            [*self.val_batches, *(self.probe.batches if self.probe is not None else [])],
            self.eval_dtypes,
            compiled=self.compiled.compile,
            capacity=warm_up.capacity_to_measure(self.device),
        )
        if self.deepest is not None:
            self._say(f"before step 0: {self.deepest}")
        self.checkpoints = CheckpointManager(self.run.checkpoints_path, t.keep_checkpoints)
        self.writes = CheckpointWrites(
            self.world, self.checkpoints, lambda: live_storages(self.model, self.optimizer)
        )
        self.metrics = MetricsLog(self.run.metrics_path)
        self.written_before = 0  # complete metrics records before a resume truncated the file
        self.counters = Counters()
        # Snapshots are fractions of the FLOP budget when there is one, so compute-matched runs
        # keep their snapshots at the same FLOPs; otherwise of the run's own cost.
        budget_flops = self.scheduler.plan.flop_budget or self.scheduler.plan.flops
        self.snapshot_flops = sorted(f * budget_flops for f in t.snapshots)

        if resume:
            self._restore()
        if self.is_main and t.log_to:
            # Before config.toml: a sink that cannot start leaves no run behind to --resume.
            sinks = open_sinks(config, self.run.path, self.quiet)
            if resume:
                path = self.run.metrics_path
                sinks.resume(read_metrics(path) if path.exists() else [], self.written_before)
            self.metrics.sinks = sinks
        if self.is_main:
            if restart:  # an earlier attempt saved no checkpoint: nothing of it is kept
                self.metrics.truncate(0)
                self._warn(
                    f"note: {self.run.path} held a run that saved no checkpoint; started over"
                )
            self.run.write_config(config)
            self.run.write_tokenizer(self.source)

    # -- checkpoints -----------------------------------------------------------------------------

    def _save(self, tags: list[str]) -> None:
        """Start writing a checkpoint (every rank takes part: the full state is gathered into
        rank 0's memory, and its thread writes it while training goes on); `self.writes.settle`
        says when it is on disk (train/checkpoint_writes.py). The checkpoint before it is
        settled first: a failed write stops the run here."""
        self.writes.settle()
        weights, optimizer_state = self.parallel.full_state(self.optimizer)

        def contents() -> tuple[dict[str, torch.Tensor], dict[str, Any], dict[str, Any]]:
            meta = {
                **self.counters.to_dict(),
                "total_steps": self.scheduler.plan.total_steps,
                "metrics_bytes": self.metrics.size(),
                "world_size": self.world_size,
                "schedule": describe(self.config.schedule),
                **config_record(self.config),  # the run's fingerprint (identity.py)
                **self.parallel.base_record(),  # a low-rank run's frozen base, by its SHA-256
                # Also here (small JSON), so that eval can refuse other data without trainer.pt.
                "data": self.batches.state_dict(),
                META_KEY: self.scheduler.state_dict(),  # how it decides the switch
            }
            state = {"optimizer": optimizer_state, "data": self.batches.state_dict()}
            return weights, state, meta

        self.writes.start(self.counters.step, tags, contents)

    def _restore(self) -> None:
        """Continue from the newest valid checkpoint. Rank 0 picks and reads it and checks that it
        fits; the weights and optimizer state then reach every rank by broadcast, so a checkpoint
        from any number of processes resumes on any other number."""
        loaded: dict[str, Any] = {}

        def pick() -> Checkpoint | None:
            self.written_before = self.metrics.complete_records()
            ckpt = self.checkpoints.resume_point(warn=self._warn)
            if ckpt is None:
                self.metrics.truncate(0)  # nothing saved yet: start over cleanly
                self._say(f"resume: {self.run.path} has no checkpoint yet; starting from step 0")
                return None
            loaded["weights"] = ckpt.load_weights(self.parallel.state_shapes())
            check_same_config(ckpt, self.config, self.run.path)
            state = ckpt.load_trainer_state()
            check_trainer_state(ckpt, state, self.source, self.parallel, self.optimizer)
            loaded.update(state)
            return ckpt

        ckpt = on_main(self.world, pick)
        if ckpt is None:
            return
        weights, optimizer_state = loaded.get("weights", {}), loaded.get("optimizer", {})
        load_full_state(ckpt, self.parallel, self.optimizer, weights, optimizer_state)
        data_state = distributed.broadcast_object(self.world, loaded.get("data", {}))
        self.batches.load_state_dict(data_state)
        self.counters = Counters.from_dict(ckpt.meta)
        auto = ckpt.path if self.scheduler.rule is not None else None
        self.scheduler.load_state_dict(scheduler_state(ckpt.meta, auto))
        if self.is_main:
            lost = self.metrics.resume_at(int(ckpt.meta["metrics_bytes"]), ckpt.step)
            if lost is not None:
                self._warn(lost)
        self._say(f"resume: continuing from {ckpt.path.name} (step {ckpt.step})")

    # -- the loop --------------------------------------------------------------------------------

    def train(self, stop_after: int | None = None) -> dict[str, Any]:
        """Run to the end of the budget, or pause, checkpointed, after `stop_after` steps in all or
        at a stop signal (`TrainingInterrupted`); return the summary. Always releases the lock."""
        try:
            with (
                Interrupt(announce=self.is_main) as interrupt,
                memory_check.explained(self),
                CollectAtBoundaries() as self.collector,
            ):
                return self._train(stop_after, interrupt)
        finally:
            self.writes.close()  # a checkpoint in flight completes before the lock is released
            self.run.close()

    def _train(self, stop_after: int | None, interrupt: Interrupt) -> dict[str, Any]:
        total = self.scheduler.plan.total_steps
        stop = total if stop_after is None else max(self.counters.step, min(stop_after, total))
        if self.scheduler.switch_step == 0 and self.counters.step == 0:
            self._save([SWITCH_TAG])
        progress = Progress(
            total,
            self.counters.step,
            quiet=self.quiet or not self.is_main,
            work_total=self.scheduler.plan.flops,
            work_initial=self.counters.flops,
        )
        self.model.train()
        pending: list[StepRecord] = []  # steps since the last boundary, their losses on device
        since = time.perf_counter()  # throughput excludes logging, evaluation and saving
        try:
            for step in range(self.counters.step, stop):
                pending.append(self._step(step))
                if step + 1 < stop:  # the next batch's copy overlaps this step on a GPU
                    self.batches.prefetch()
                boundary = self._boundary_after(pending[-1], stop, interrupt)
                if boundary is not None:
                    self._log(pending, time.perf_counter() - since, progress)
                    self._cross(boundary, progress, interrupt)
                    self.collector.at_boundary(checkpoint=bool(boundary.tags))
                    pending, since = [], time.perf_counter()
        finally:
            progress.close()
            if self.metrics.sinks is not None:
                self.metrics.sinks.close()
        self.writes.settle()
        return self._summary()

    def _step(self, step: int) -> StepRecord:
        """Train step `step` (0-based) at the schedule's depth and learning rate and count it."""
        t, total = self.config.train, self.scheduler.plan.total_steps
        planned = self.scheduler.begin(step)  # decided at a boundary before, if one was due
        depth, phase = planned.depth, planned.phase
        lr = lr_at(step, total, t)
        started = time.perf_counter()
        batch = self.batches.next()
        rows = rank_rows(t.batch_size, self.rank, self.world_size)  # in the global batch
        seeds = state_seeds(t.seed, step, rows)
        loss, grad_norm = train_step(self.step_context, batch, depth, lr, seeds)
        if self.device.type == "cuda" and (step + 1) % t.log_every == 0:
            torch.cuda.synchronize(self.device)
        seconds = time.perf_counter() - started
        step_flops = self.scheduler.plan.step_flops(depth)
        c = self.counters
        flops_before = c.flops
        c.add_step(phase, t.tokens_per_step, step_flops, seconds)
        return StepRecord(
            step=c.step,
            depth=depth,
            phase=phase,
            lr=lr,
            loss=loss,
            grad_norm=grad_norm,
            step_flops=step_flops,
            flops_before=flops_before,
            flops=c.flops,
            wall=c.wall,
        )

    def _boundary_after(
        self, record: StepRecord, stop: int, interrupt: Interrupt
    ) -> Boundary | None:
        """What is due after the step `record` finished: None when the run just goes on."""
        done, total = record.step, self.scheduler.plan.total_steps
        every = self.config.eval.every
        tags = self._checkpoint_tags(record)
        if done == stop < total:
            tags.append("paused")
        evaluate = done == total or bool(every and done % every == 0)
        switch = self.scheduler.probe_due(done) or self.scheduler.decides_at(done)
        log = done % self.config.train.log_every == 0 or bool(tags) or evaluate or switch
        stop_signal = interrupt.agreed(self.world, log) if done < total else None
        if stop_signal is not None and "paused" not in tags:
            tags.append("paused")
        if not log and stop_signal is None:
            return None
        return Boundary(tags, evaluate, stop_signal)

    def _log(self, pending: list[StepRecord], seconds: float, progress: Progress) -> None:
        """Bring the pending steps' losses to the host (`host_values`), stop on a non-finite one,
        write their log lines (which the auto switch watches) and show the progress."""
        values = host_values(self.world, [(p.loss, p.grad_norm, p.depth) for p in pending])
        for p, (loss, _) in zip(pending, values, strict=True):
            if not math.isfinite(loss):
                with contextlib.suppress(UserError):  # the checkpoints on disk are named
                    self.writes.settle()
                raise diverged(loss, p.step, p.depth, self.checkpoints)
        t = self.config.train
        seconds = max(seconds, 1e-9)
        tok_per_s = len(pending) * t.tokens_per_step / seconds
        mfu = sum(p.step_flops for p in pending) / seconds / self.peak_flops
        records: list[dict[str, Any]] = [
            {
                "kind": "train",
                "step": p.step,
                "tokens": p.step * t.tokens_per_step,
                "depth": p.depth,
                "phase": p.phase,
                "loss": loss,
                "lr": p.lr,
                "grad_norm": grad_norm,
                "flops": p.flops,
                "wall": p.wall,
                "tok_per_s": tok_per_s,
                "mfu": mfu,
            }
            for p, (loss, grad_norm) in zip(pending, values, strict=True)
            if p.step % t.log_every == 0 or p.step == self.scheduler.plan.total_steps
        ]
        if self.is_main:
            self.metrics.write(records)
        if self.scheduler.rule == "plateau":  # it watches the logged losses
            for r in records:
                self.scheduler.observe(r["step"], r["loss"])
        last = pending[-1]
        fields = {
            "phase": last.phase,
            "K": str(last.depth),
            "loss": f"{values[-1][0]:.3f}",
            "tok/s": f"{tok_per_s:,.0f}",
            "FLOPs": f"{last.flops:.2e}/{self.scheduler.plan.flops:.2e}",
        }
        progress.update(last.step, fields, work=last.flops)

    def _cross(self, boundary: Boundary, progress: Progress, interrupt: Interrupt) -> None:
        """The auto switch's probe and decision, the evaluation and the checkpoint due at this
        boundary; then stop if a signal asked to."""
        tags = boundary.tags
        tags += self._auto_switch(self.counters.step)  # in place: the boundary saves a checkpoint
        if boundary.evaluate:
            nll = self._evaluate()
            shown = ", ".join(f"K={d}: {v:.3f}" for d, v in nll.items())
            progress.write(f"eval at step {self.counters.step}: NLL {shown}")
        if tags:
            self._save(tags)
        if boundary.stop_signal is not None:
            saved = self.writes.settle()
            assert saved is not None  # a stop always saves ("paused")
            raise interrupt.stopped(saved.path.name, self.run.path, self.world_size)

    def _checkpoint_tags(self, record: StepRecord) -> list[str]:
        t, done = self.config.train, record.step
        tags = []
        if t.checkpoint_every and done % t.checkpoint_every == 0:
            tags.append("periodic")
        if done == self.scheduler.switch_step:
            tags.append(SWITCH_TAG)
        for fraction, threshold in zip(sorted(t.snapshots), self.snapshot_flops, strict=True):
            if record.flops_before < threshold <= record.flops:
                tags.append(f"snapshot-{fraction:g}")
        if done == self.scheduler.plan.total_steps:
            tags.append("final")
        return tags

    def _evaluate(self) -> dict[int, float]:
        depths = self.config.eval.depths
        # Every rank evaluates the same batches (FSDP2 needs all of them to gather the weights);
        # the result is the same everywhere and rank 0 writes it.
        nll = self.parallel.evaluate(self.val_batches, depths, self.dtype)
        record = {
            "kind": "eval",
            **self.counters.position(),
            "nll_by_depth": {str(d): v for d, v in nll.items()},
        }
        mean = mean_serving_nll(nll)
        if mean is not None:
            record["mean_serving_nll"] = mean
        if self.counters.step == self.scheduler.plan.total_steps and len(self.eval_dtypes) > 1:
            exact = self.parallel.evaluate(self.val_batches, depths, self.eval_dtypes[-1])
            record["nll_by_depth_fp32"] = {str(d): v for d, v in exact.items()}
        if self.is_main:
            self.metrics.write([record])
        return nll

    def _auto_switch(self, done: int) -> list[str]:
        """Probe (`depth-gap`) and ask the rule at boundary `done` where due, before the
        checkpoint there, which then holds the decision; the checkpoint tags of a switch here."""
        where, records = self.counters.position(), []
        if self.probe is not None and self.scheduler.probe_due(done):
            records.append(self.probe.feed(self.scheduler, self.parallel, where))
        check, decision = self.scheduler.decide(done)
        records += decision_records(self.scheduler, self.probe, where, check, decision)
        if self.is_main and records:
            self.metrics.write(records)
        return [] if decision is None else [SWITCH_TAG, decision.tag]

    def _say(self, line: str) -> None:
        if self.is_main and not self.quiet:
            print(line, flush=True)

    def _warn(self, line: str) -> None:
        """Warnings go to stderr, and --quiet never silences them."""
        if self.is_main:
            print(line, file=sys.stderr, flush=True)

    def _summary(self) -> dict[str, Any]:
        summary = self.counters.summary(describe(self.config.schedule), self.scheduler.plan)
        # How the arithmetic ran (docs/guides/study-speed.md): none of it defines the run.
        summary.update(
            threads=self.threads,
            compiled=self.compiled.compile,
            compile_reason=self.compiled.reason,
            compile_cache=compilation.cache_directory() if self.compiled.compile else None,
            precision=self.precision,
            weights_dtype=str(next(self.model.parameters()).dtype).removeprefix("torch."),
        )
        summary["data"] = {"kind": self.config.data.kind, "about": self.source.describe()}
        summary["peak_flops"] = {"per_process": self.peak_per_process, "from": self.peak_from}
        summary["switch"] = switch_summary(self.scheduler, self.probe, self.config.train)
        if self.is_main:
            write_json_atomic(self.run.summary_path, summary)
        return summary


@dataclass
class StepRecord:
    """A finished optimizer step and the run's counters right after it; its loss and gradient
    norm stay on the device until the next log line (docs/design.md §10)."""

    step: int
    """Steps done, this one included (the step number of its log line)."""
    depth: int
    phase: str
    lr: float
    loss: torch.Tensor
    grad_norm: torch.Tensor
    step_flops: float
    """Modeled FLOPs of this step."""
    flops_before: float
    """The run's modeled FLOPs before this step and after it (`flops`)."""
    flops: float
    wall: float
    """The run's training wall-clock after this step."""


@dataclass
class Boundary:
    """What is due after a step: a log line always, and maybe more."""

    tags: list[str]
    """Tags of the checkpoint to save (none: no checkpoint)."""
    evaluate: bool
    stop_signal: int | None
    """The stop signal the ranks agreed to stop on here."""


class TrainingDiverged(UserError):
    """The loss became NaN or infinite."""


def diverged(loss: float, step: int, depth: int, checkpoints: CheckpointManager) -> UserError:
    """The error for a non-finite loss at (1-based) `step`: which checkpoint survives, and how to
    train on without the divergence."""
    saved = checkpoints.all()
    then = (
        f"the last good checkpoint (step {saved[-1].step}) is kept in {checkpoints.directory}; "
        "lower train.lr or raise train.warmup, then start a new run with another --out"
        if saved
        else "no checkpoint was saved yet; lower train.lr or raise train.warmup and start again "
        "with the same --out"
    )
    return TrainingDiverged(f"loss became {loss} at step {step} (depth {depth}); {then}")
