"""The run directory (docs/design.md §7) and the rules for starting or resuming a run in it.

    RUN/config.toml     the resolved configuration
    RUN/metrics.jsonl   training and evaluation records
    RUN/summary.json    the closing summary
    RUN/checkpoints/    step-NNNNNNN/ directories
    RUN/tokenizer/      the data's tokenizer (data without text has none)
    RUN/.lock           held by the one process writing the run (see fixedfirst.locks)
    RUN/tensorboard/, RUN/wandb/, RUN/wandb-run-id    with train.log_to (`sinks.py`)

A directory that already holds a run is never written without `--resume`, and a resume may not
change what defines the run: the model, the data, the schedule, or anything that moves the
schedule's steps (seed, budgets, batch and sequence length; with `schedule.switch = "auto"`, the
[switch] rule and train.log_every, whose logged losses it reads). Changing logging, checkpointing
or evaluation settings on resume is otherwise fine.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from fixedfirst import locks
from fixedfirst.config import RunConfig, load_config, read_toml, to_toml
from fixedfirst.data.source import BatchSource
from fixedfirst.data.tokenizer import TOKENIZER_DIR
from fixedfirst.errors import UserError
from fixedfirst.files import write_error, write_text_atomic
from fixedfirst.paths import absolute

RUN_DEFINING_TRAIN_KEYS = ("seed", "tokens", "flops", "batch_size", "seq_len", "grad_depth")
RUN_DEFINING_SECTIONS = ("model", "data", "schedule")


class RunDir:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    config_path = property(lambda self: self.path / "config.toml")
    metrics_path = property(lambda self: self.path / "metrics.jsonl")
    summary_path = property(lambda self: self.path / "summary.json")
    checkpoints_path = property(lambda self: self.path / "checkpoints")
    tokenizer_path = property(lambda self: self.path / TOKENIZER_DIR)

    def holds_run(self) -> bool:
        return any(p.exists() for p in (self.config_path, self.metrics_path, self.checkpoints_path))

    def saved_config(self) -> RunConfig:
        if not self.config_path.is_file():
            raise UserError(f"{self.path} holds no run (no config.toml); train into it first")
        config = load_config(self.config_path)
        raw = config.data.path
        # Runs written before data.path was stored absolute named it relative to the working
        # directory of the command that trained them; read there when it is not in the run.
        if raw is not None and not Path(raw).exists():
            saved = read_toml(self.config_path).get("data", {}).get("path")
            if isinstance(saved, str) and not Path(saved).is_absolute() and Path(saved).exists():
                config = replace(config, data=replace(config.data, path=saved))
        return config

    def has_checkpoints(self) -> bool:
        """Whether any checkpoint directory exists (complete or not)."""
        path = self.checkpoints_path
        return path.is_dir() and any(p.name.startswith("step-") for p in path.iterdir())

    def check_new(self) -> None:
        """Refuse to start a fresh run where one already is; make the directory otherwise.

        A directory whose run never saved a checkpoint (it failed before its first one, e.g.
        on a value only training can find wrong) holds nothing a resume could use: it may be
        started again, with a corrected configuration, without deleting it by hand."""
        if self.path.exists() and not self.path.is_dir():
            raise UserError(f"--out {self.path} exists and is not a directory")
        if self.holds_run() and self.has_checkpoints():
            raise UserError(
                f"{self.path} already holds a run; pass --resume to continue it, "
                "or choose another --out"
            )
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            probe = self.path / ".write-test"
            probe.write_text("")
            probe.unlink()
        except OSError as e:
            raise UserError(f"cannot write to {self.path}: {e.strerror or e}") from None

    def open_for_writing(self, config: RunConfig, resume: bool) -> bool:
        """Check that `config` may start (or resume) here and take the run's lock; True when
        an earlier attempt that saved no checkpoint is being started over."""
        if resume:
            saved = self.saved_config()
            locks.acquire(self.path, "train --resume")
        else:
            self.check_new()
            locks.acquire(self.path, "train")
        try:
            if resume:
                check_resume(saved, config)
                return False
            if self.has_checkpoints():  # another process started it before we took the lock
                self.check_new()
            return self.holds_run()
        except BaseException:
            locks.release(self.path)
            raise

    def close(self) -> None:
        locks.release(self.path)

    def write_tokenizer(self, source: BatchSource) -> None:
        """RUN/tokenizer: the data's tokenizer, so generation and export need only the run."""
        if self.tokenizer_path.exists():
            return
        tmp = self.path / f".tokenizer.tmp-{os.getpid()}"
        try:
            shutil.rmtree(tmp, ignore_errors=True)
            if source.save_tokenizer(tmp):
                os.replace(tmp, self.tokenizer_path)
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            raise write_error(self.tokenizer_path, e) from None

    def refuse_other_run(self, config: RunConfig) -> None:
        """Refuse a directory that holds a run defined differently from `config` (experiments
        reuse a finished run only when it is the run they ask for)."""
        if not self.config_path.is_file():
            return
        diff = run_defining_differences(self.saved_config(), config)
        if diff:
            raise UserError(
                f"{self.path} holds a run with a different configuration ({', '.join(diff)}); "
                "use another --out or delete that run directory"
            )

    def write_config(self, config: RunConfig) -> None:
        """config.toml, with data.path absolute: the run reads its data from anywhere."""
        write_text_atomic(self.config_path, to_toml(stored(config)))


def stored(config: RunConfig) -> RunConfig:
    """`config` as a run directory stores it: data.path absolute (docs/design.md §7)."""
    if config.data.path is None:
        return config
    return replace(config, data=replace(config.data, path=absolute(config.data.path)))


def run_defining_differences(saved: RunConfig, new: RunConfig) -> list[str]:
    """The `section.key` names whose values differ and that a resume may not change. Both
    configurations are compared resolved (a data kind's options with their defaults, data.path
    absolute), as the run directory stores them."""
    from fixedfirst.data.registry import resolve_data

    saved, new = stored(resolve_data(saved)), stored(resolve_data(new))

    def flat(config: RunConfig) -> dict[str, Any]:
        d = config.to_dict()
        out = {f"{s}.{k}": v for s in RUN_DEFINING_SECTIONS for k, v in d[s].items()}
        # Where the data lives is not what it is: a moved run (or moved data) resumes with
        # --set data.path=..., and the checkpoint's data fingerprint refuses other data.
        out.pop("data.path", None)
        out.update({f"train.{k}": d["train"].get(k) for k in RUN_DEFINING_TRAIN_KEYS})
        if config.schedule.auto_switch:  # the rule, and the losses it reads, move the switch
            out.update({f"switch.{k}": v for k, v in d["switch"].items()})
            out["train.log_every"] = d["train"]["log_every"]
        return out

    a, b = flat(saved), flat(new)
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def check_resume(saved: RunConfig, new: RunConfig) -> None:
    diff = run_defining_differences(saved, new)
    if diff:
        raise UserError(
            "cannot resume with a configuration that changes the run: "
            + ", ".join(diff)
            + " differ from the run's config.toml (start a new run with another --out)"
        )
    # Logging may change on resume, but not the x-axis of curves that go on in the same place.
    continued = [name for name in new.train.log_to if name in saved.train.log_to]
    if continued and new.train.log_axis != saved.train.log_axis:
        raise UserError(
            f"train.log_axis = {new.train.log_axis!r}: the run's {' and '.join(continued)} curves "
            f"are on the {saved.train.log_axis!r} axis and a resume continues them; keep "
            f"log_axis = {saved.train.log_axis!r}"
        )
