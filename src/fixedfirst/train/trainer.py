"""The training loop: one depth per optimizer step from the schedule, budgets, checkpoints, metrics.

A run is planned before the first step: the token budget (or, with `train.flops`, the number of
steps whose realised modeled cost fits the FLOP budget) fixes `total_steps`, and with it every
step's depth, learning rate and phase. Each step draws its depth from the schedule (a pure
function of seed and step), runs `batch_size / micro_batch` micro-batches at that depth, clips and
steps AdamW. Losses stay on the device between log lines: the host waits for the device only when
a line is written, a checkpoint is taken, or an evaluation runs.

With `schedule.switch = "auto"` the switch step is decided as the run goes (`auto_switch.py`,
docs/design.md §14): at the boundaries its rule asks for, the trainer brings the losses to the
host, lets it probe and check, and from a decision on draws every depth from the switched
schedule.

Everything a resumed run needs (weights, optimizer, data position, counters, the metrics file's
length, an auto switch's observations) is in each checkpoint, so N steps straight through and k
steps plus a resume give the same weights and the same metrics.

Under torchrun (docs/design.md §8) every process builds the same model from the same seed, draws the
same depth for a step (the schedule is a pure function of seed and step; `_flush` checks that the
ranks agree), trains on its own rows of the global batch and averages gradients with DDP or
FSDP2 (`parallel.py`). Only rank 0 writes the run directory. The random initial recurrent state
of every sequence is drawn from a seed derived from (seed, step, row of the global batch), not
from the global RNG, so the training arithmetic does not depend on the number of processes or
on where a run was resumed, and checkpoints need no RNG state.
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Any

import torch

from fixedfirst.compute import Budget, flop_model, plan_budget
from fixedfirst.config import RunConfig
from fixedfirst.data.registry import build_source, resolve_data
from fixedfirst.data.source import BatchSource, rank_rows
from fixedfirst.errors import UserError
from fixedfirst.files import write_json_atomic
from fixedfirst.hardware import choose_threads, measured_peak_flops, resolve_device, resolve_dtype
from fixedfirst.model import LoopedTransformer
from fixedfirst.schedules import Schedule, describe
from fixedfirst.train import compilation, distributed, memory_check
from fixedfirst.train.auto_switch import META_KEY, AutoSwitch, switch_summary
from fixedfirst.train.checkpoint import Checkpoint, CheckpointManager
from fixedfirst.train.counters import Counters
from fixedfirst.train.distributed import World, on_main
from fixedfirst.train.divergence import diverged
from fixedfirst.train.evaluation import mean_serving_nll, validation_nll
from fixedfirst.train.interrupt import Interrupt
from fixedfirst.train.metrics import MetricsLog, read_metrics
from fixedfirst.train.optim import build_optimizer, lr_at
from fixedfirst.train.parallel import ParallelModel
from fixedfirst.train.pending import PendingStep, host_values
from fixedfirst.train.progress import Progress
from fixedfirst.train.resume import check_same_config, check_trainer_state
from fixedfirst.train.run_dir import RunDir, config_record
from fixedfirst.train.sinks import check_packages, open_sinks
from fixedfirst.train.step import state_seeds, train_step


class Trainer:
    def __init__(
        self,
        config: RunConfig,
        out: str,
        resume: bool = False,
        quiet: bool = False,
        force: bool = False,
    ) -> None:
        # The data kind's options complete, as config.toml stores them (a later change of a
        # default cannot change a saved run); an unknown kind or option is refused here.
        config = resolve_data(config)
        self.config = config
        self.run = RunDir(out)
        self.quiet = quiet
        self.world = World.from_env()
        self.rank, self.world_size = self.world.rank, self.world.world_size
        self.is_main = self.world.is_main
        t = config.train

        # Everything that can be refused is checked before the run directory is touched.
        self.budget: Budget = plan_budget(config)
        self.schedule = Schedule(config.schedule, t.seed)
        self.flops_model = flop_model(config.model, t.seq_len)
        self.device = distributed.process_device(self.world, resolve_device(t.device))
        self.dtype = resolve_dtype(t.precision, self.device)
        self.memory_placement = memory_check.placement(config, self.device, self.dtype, self.world)
        memory_check.check_training_memory(config, self.memory_placement, self.budget.total_steps)
        self.source: BatchSource = build_source(config)
        if self.source.vocab_size > config.model.vocab_size:
            raise UserError(
                f"model.vocab_size = {config.model.vocab_size} is smaller than the data's "
                f"vocabulary ({self.source.vocab_size}); set model.vocab_size >= "
                f"{self.source.vocab_size}"
            )
        self.val_batches = self.source.validation_batches(config.eval.batches, t.micro_batch())
        place = (self.world, self.device, self.dtype)
        self.auto = AutoSwitch.for_run(
            config, self.budget.total_steps, self.flops_model, self.source, *place
        )
        check_packages(t.log_to)
        local = t.batch_size // self.world_size
        micro = t.micro_batch(self.world_size)
        if t.batch_size % self.world_size or local % micro:
            raise UserError(
                f"train.batch_size = {t.batch_size} must split into {self.world_size} rank(s) "
                f"of whole micro-batches of {micro}"
            )

        distributed.start(self.world, self.device)
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
        processes_here = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        self.threads, threads_why = choose_threads(t.threads, processes_here)
        torch.set_num_threads(self.threads)
        peak = self.peak_flops = measured_peak_flops(self.device.type, self.dtype) * self.world_size
        self.compiled = compilation.decide(t.compile, self.device, self.budget.flops, peak)
        how = "compiled" if self.compiled.compile else "eager"
        self.precision = "bf16" if self.dtype == torch.bfloat16 else "fp32"
        self._say(
            f"{self.threads} thread(s) ({threads_why}); {how} ({self.compiled.reason}); "
            f"{self.precision} (train.precision = {t.precision})"
        )

        torch.manual_seed(t.seed)  # the same initial weights on every rank
        model = LoopedTransformer(config.model).to(self.device)
        if self.compiled.compile:
            compilation.compile_blocks(model)
        self.parallel = ParallelModel(model, self.world, t.strategy, self.device, self.dtype)
        self.model = self.parallel.module
        # After sharding: FSDP2 replaces the parameters by sharded ones.
        self.optimizer = build_optimizer(self.model, t)
        self.checkpoints = CheckpointManager(self.run.checkpoints_path, t.keep_checkpoints)
        self.metrics = MetricsLog(self.run.metrics_path)
        self.written_before = 0  # complete metrics records before a resume truncated the file
        self.counters = Counters()
        self.switch_step = self.schedule.switch_step(self.budget.total_steps)
        # Snapshots are fractions of the FLOP budget when there is one, so compute-matched runs
        # keep their snapshots at the same FLOPs; otherwise of the run's own cost.
        budget_flops = self.budget.flop_budget or self.budget.flops
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

    def _save(self, tags: list[str]) -> Checkpoint:
        """Write a checkpoint (every rank takes part: FSDP2 gathers the full state onto rank 0,
        which writes it); every rank returns once it is on disk, or raises the same error."""
        weights, optimizer_state = self.parallel.full_state(self.optimizer)

        def write() -> Checkpoint:
            meta = {
                **self.counters.to_dict(),
                "total_steps": self.budget.total_steps,
                "metrics_bytes": self.metrics.size(),
                "world_size": self.world_size,
                "schedule": describe(self.config.schedule),
                **config_record(self.config),  # the run's fingerprint (identity.py)
                # Also here (small JSON), so that eval can refuse other data without trainer.pt.
                "data": self.source.state_dict(),
            }
            if self.auto is not None:  # what a resume decides the switch from
                meta[META_KEY] = self.auto.state_dict()
            state = {"optimizer": optimizer_state, "data": self.source.state_dict()}
            return self.checkpoints.save(self.counters.step, weights, state, meta, tags)

        return on_main(self.world, write)

    def _restore(self) -> None:
        """Continue from the newest valid checkpoint. Rank 0 picks and reads it and checks that it
        fits; the weights and optimizer state then reach every rank by broadcast, so a checkpoint
        from any number of processes resumes on any other number."""
        loaded: dict[str, Any] = {}

        def pick() -> Checkpoint | None:
            self.checkpoints.recover_interrupted_writes()
            self.checkpoints.set_aside_incomplete(warn=self._warn)
            self.written_before = self.metrics.complete_records()
            ckpt = self.checkpoints.latest_valid(warn=self._warn)
            if ckpt is None:
                if self.checkpoints.all():
                    raise UserError(
                        f"no loadable checkpoint in {self.checkpoints.directory}: every one is "
                        "corrupt; start a new run with another --out"
                    )
                self.metrics.truncate(0)  # nothing saved yet: start over cleanly
                self._say(f"resume: {self.run.path} has no checkpoint yet; starting from step 0")
                return None
            loaded["weights"] = ckpt.load_weights(self.parallel.parameter_shapes())
            check_same_config(ckpt, self.config, self.run.path)
            state = ckpt.load_trainer_state()
            check_trainer_state(ckpt, state, self.source, self.parallel, self.optimizer)
            loaded.update(state)
            return ckpt

        ckpt = on_main(self.world, pick)
        if ckpt is None:
            return
        try:
            self.parallel.load_full_state(
                self.optimizer, loaded.get("weights", {}), loaded.get("optimizer", {})
            )
        except (KeyError, ValueError, RuntimeError, TypeError) as e:
            raise UserError(f"checkpoint {ckpt.path}: state does not fit ({e})") from None
        self.source.load_state_dict(distributed.broadcast_object(self.world, loaded.get("data")))
        self.counters = Counters.from_dict(ckpt.meta)
        if self.auto is not None:
            self.schedule = self.auto.restore(ckpt.meta, self.schedule)
        if self.is_main:
            self.metrics.truncate(int(ckpt.meta["metrics_bytes"]))
        self._say(f"resume: continuing from {ckpt.path.name} (step {ckpt.step})")

    # -- the loop --------------------------------------------------------------------------------

    def _say(self, line: str) -> None:
        if self.is_main and not self.quiet:
            print(line, flush=True)

    def _warn(self, line: str) -> None:
        """Warnings go to stderr, and --quiet never silences them."""
        if self.is_main:
            print(line, file=sys.stderr, flush=True)

    def _train_step(self, step: int, depth: int, lr: float) -> tuple[torch.Tensor, torch.Tensor]:
        t = self.config.train
        batch = self.source.next_batch(t.batch_size, self.rank, self.world_size).to(self.device)
        rows = rank_rows(t.batch_size, self.rank, self.world_size)  # in the global batch
        seeds = state_seeds(t.seed, step, rows)
        return train_step(
            self.model, self.optimizer, batch, depth, lr, t, seeds, self.dtype, self.parallel
        )

    def _flush(self, pending: list[PendingStep], interval: tuple[int, float, float]) -> float:
        """Bring pending losses to the host (`host_values`), stop on a non-finite one, log lines
        (which the auto switch watches); return the last step's loss."""
        values = host_values(self.world, pending)
        for p, (loss, _) in zip(pending, values, strict=True):
            if not math.isfinite(loss):
                raise diverged(loss, p.step + 1, p.depth, self.checkpoints)
        tokens, flops, seconds = interval
        seconds = max(seconds, 1e-9)
        records = []
        for p, (loss, grad_norm) in zip(pending, values, strict=True):
            done = p.step + 1
            if done % self.config.train.log_every and done != self.budget.total_steps:
                continue
            records.append(
                {
                    "kind": "train",
                    "step": done,
                    "tokens": done * self.config.train.tokens_per_step,
                    "depth": p.depth,
                    "phase": p.phase,
                    "loss": loss,
                    "lr": p.lr,
                    "grad_norm": grad_norm,
                    "flops": self.counters.flops,
                    "wall": self.counters.wall,
                    "tok_per_s": tokens / seconds,
                    "mfu": flops / seconds / self.peak_flops,
                }
            )
        if self.is_main:
            self.metrics.write(records)
        if self.auto is not None:
            self.auto.observe(records)
        pending.clear()
        return values[-1][0]

    def _evaluate(self) -> dict[int, float]:
        depths = self.config.eval.depths
        # Every rank evaluates the same batches (FSDP2 needs all of them to gather the weights);
        # the result is the same everywhere and rank 0 writes it.
        nll = validation_nll(self.model, self.val_batches, depths, self.device, self.dtype)
        self.parallel.after_eval()
        record = {
            "kind": "eval",
            "step": self.counters.step,
            "tokens": self.counters.tokens,
            "flops": self.counters.flops,
            "nll_by_depth": {str(d): v for d, v in nll.items()},
        }
        mean = mean_serving_nll(nll)
        if mean is not None:
            record["mean_serving_nll"] = mean
        if self.is_main:
            self.metrics.write([record])
        return nll

    def _auto_switch(self, done: int) -> list[str]:
        """Probe and check the auto switch at boundary `done`; the checkpoint tags of a switch."""
        assert self.auto is not None
        records, decision = self.auto.at_boundary(done, self.parallel, self.counters)
        if self.is_main:
            self.metrics.write(records)
        if decision is None:
            return []
        self.schedule = self.schedule.switched_at(decision.step)
        return ["switch", decision.tag]

    def _checkpoint_tags(self, done: int, flops_before: float) -> list[str]:
        t = self.config.train
        tags = []
        if t.checkpoint_every and done % t.checkpoint_every == 0:
            tags.append("periodic")
        if self.switch_step is not None and done == self.switch_step:
            tags.append("switch")
        for fraction, threshold in zip(sorted(t.snapshots), self.snapshot_flops, strict=True):
            if flops_before < threshold <= self.counters.flops:
                tags.append(f"snapshot-{fraction:g}")
        if done == self.budget.total_steps:
            tags.append("final")
        return tags

    def train(self, stop_after: int | None = None) -> dict[str, Any]:
        """Run to the end of the budget, or pause, checkpointed, after `stop_after` steps in all or
        at a stop signal (`TrainingInterrupted`); return the summary. Always releases the lock."""
        try:
            with Interrupt(announce=self.is_main) as interrupt, memory_check.explained(self):
                return self._train(stop_after, interrupt)
        finally:
            self.run.close()

    def _train(self, stop_after: int | None, interrupt: Interrupt) -> dict[str, Any]:
        t = self.config.train
        total = self.budget.total_steps
        stop = total if stop_after is None else max(self.counters.step, min(stop_after, total))
        c = self.counters
        if self.switch_step == 0 and c.step == 0:
            self._save(["switch"])
        progress = Progress(
            total,
            c.step,
            quiet=self.quiet or not self.is_main,
            work_total=self.budget.flops,
            work_initial=c.flops,
        )
        pending: list[PendingStep] = []
        self.model.train()
        interval_start, interval_tokens, interval_flops = time.perf_counter(), 0, 0.0
        last_loss = float("nan")
        try:
            for step in range(c.step, stop):
                stage = self.schedule.stage_at(step, total)
                depth = self.schedule.depth(step, total)
                lr = lr_at(step, total, t)
                started = time.perf_counter()
                loss, grad_norm = self._train_step(step, depth, lr)
                if self.device.type == "cuda" and (step + 1) % t.log_every == 0:
                    torch.cuda.synchronize(self.device)
                seconds = time.perf_counter() - started
                step_flops = t.tokens_per_step * self.flops_model.train(depth, t.grad_depth)
                flops_before = c.flops
                c.add_step(stage.phase, t.tokens_per_step, step_flops, seconds)
                interval_tokens += t.tokens_per_step
                interval_flops += step_flops
                pending.append(PendingStep(step, depth, stage.phase, lr, loss, grad_norm))

                tags = self._checkpoint_tags(c.step, flops_before)
                if c.step == stop < total:
                    tags.append("paused")
                evaluate = c.step == total or (
                    self.config.eval.every and c.step % self.config.eval.every == 0
                )
                due = self.auto is not None and self.auto.due(c.step)
                flush = c.step % t.log_every == 0 or bool(tags) or bool(evaluate) or due
                stop_signal = interrupt.agreed(self.world, flush) if c.step < total else None
                if stop_signal is not None and "paused" not in tags:
                    tags.append("paused")
                    flush = True
                if flush:
                    interval = (
                        interval_tokens,
                        interval_flops,
                        time.perf_counter() - interval_start,
                    )
                    if pending:
                        last_loss = self._flush(pending, interval)
                    progress.update(
                        c.step,
                        {
                            "phase": stage.phase,
                            "K": str(depth),
                            "loss": f"{last_loss:.3f}",
                            "tok/s": f"{interval[0] / max(interval[2], 1e-9):,.0f}",
                            "FLOPs": f"{c.flops:.2e}/{self.budget.flops:.2e}",
                        },
                        work=c.flops,
                    )
                if due:
                    tags += self._auto_switch(c.step)
                if evaluate:
                    nll = self._evaluate()
                    shown = ", ".join(f"K={d}: {v:.3f}" for d, v in nll.items())
                    progress.write(f"eval at step {c.step}: NLL {shown}")
                if tags:
                    saved = self._save(tags)
                if stop_signal is not None:
                    raise interrupt.stopped(saved.path.name, self.run.path, self.world_size)
                if flush:  # the next interval's throughput excludes logging, eval and saving
                    interval_start, interval_tokens, interval_flops = time.perf_counter(), 0, 0.0
        finally:
            progress.close()
            if self.metrics.sinks is not None:
                self.metrics.sinks.close()
        return self._summary()

    def _summary(self) -> dict[str, Any]:
        summary = self.counters.summary(describe(self.config.schedule), self.budget)
        summary.update(
            threads=self.threads, compiled=self.compiled.compile, precision=self.precision
        )
        summary["switch"] = switch_summary(
            self.schedule, self.budget.total_steps, self.auto, self.config.train
        )
        if self.is_main:
            write_json_atomic(self.run.summary_path, summary)
        return summary
