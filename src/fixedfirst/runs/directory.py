"""The run directory (docs/design.md §7) and the rules for starting or resuming a run in it.

    RUN/config.toml     the resolved configuration (its first line marks it as fixedfirst's)
    RUN/metrics.jsonl   training and evaluation records
    RUN/summary.json    the closing summary
    RUN/checkpoints/    step-NNNNNNN/ directories (each stores the configuration too)
    RUN/tokenizer/      the data's tokenizer (data without text has none)
    RUN/.lock           held by the one process writing the run (see fixedfirst.files.locks)
    RUN/tensorboard/, RUN/wandb/, RUN/wandb-run-id    with train.log_to (`train/sinks.py`)

A new run starts only in a directory that is new, empty, or holds what fixedfirst wrote there
(a run that saved no checkpoint yet, which starts over): never in a prepared data directory,
never in one holding files of someone else's (`--force` trains beside those, but never over a
file of the same name). A directory that holds a run is never written without `--resume`, and
a resume may not change what defines the run (`identity.py`). A run whose config.toml was
deleted reads its configuration from its newest checkpoint, and a resume writes it back.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from fixedfirst.config import RunConfig, apply_overrides, load_config, read_toml, to_toml
from fixedfirst.data.prepared import is_prepared
from fixedfirst.data.source import BatchSource
from fixedfirst.data.tokenizer import TOKENIZER_DIR
from fixedfirst.errors import UserError
from fixedfirst.files import locks
from fixedfirst.files.paths import absolute, shown
from fixedfirst.files.writing import write_error, write_text_atomic
from fixedfirst.runs.identity import CONFIG_KEY, describe_differences, run_defining_differences

CONFIG_MARK = "# fixedfirst run configuration (resolved), written by `fixedfirst train`\n"
"""The first line of every config.toml a run writes: how a later start knows the file is ours."""

TENSORBOARD_DIR = "tensorboard"
WANDB_DIR = "wandb"
WANDB_ID_FILE = "wandb-run-id"
"""Where the logging sinks of train.log_to keep their files (`train/sinks.py`)."""
RUN_FILES = ("config.toml", "metrics.jsonl", "summary.json", "checkpoints", TOKENIZER_DIR)
SINK_FILES = (TENSORBOARD_DIR, WANDB_DIR, WANDB_ID_FILE)
_WARNED_MISSING: set[Path] = set()
"""Runs whose missing config.toml this process has already warned about (once is enough)."""
OWN_TEMPORARY = re.compile(r"\.(config\.toml|summary\.json|tokenizer)\.tmp-\d+|\.write-test")
"""What a run leaves beside its files when a write is interrupted."""


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

    def saved_config(self, overrides: list[str] | None = None) -> RunConfig:
        """The run's configuration (with `--set` overrides): config.toml, or when that was
        deleted, the configuration its newest checkpoint stores (said on stderr)."""
        if not self.config_path.is_file():
            return self._config_from_checkpoint(overrides or [])
        config = load_config(self.config_path, overrides)
        raw = config.data.path
        # Runs written before data.path was stored absolute named it relative to the working
        # directory of the command that trained them; read there when it is not in the run.
        if raw is not None and not Path(raw).exists():
            saved = read_toml(self.config_path).get("data", {}).get("path")
            if isinstance(saved, str) and not Path(saved).is_absolute() and Path(saved).exists():
                config = replace(config, data=replace(config.data, path=saved))
        return config

    def _config_from_checkpoint(self, overrides: list[str]) -> RunConfig:
        from fixedfirst.runs.checkpoint import CheckpointManager, warn

        if not self.path.is_dir():
            raise UserError(f"run directory {shown(self.path)} does not exist")
        found = CheckpointManager(self.checkpoints_path).all()
        if not found:
            raise UserError(
                f"{shown(self.path)} holds no run (no config.toml); train into it first"
            )
        newest = found[-1]
        raw = newest.meta.get(CONFIG_KEY)
        if raw is None:
            raise UserError(
                f"{shown(self.path)} has checkpoints but no config.toml, and they were written "
                "before checkpoints stored the configuration: put the configuration it was "
                f"trained with back as {shown(self.config_path)}"
            )
        config = RunConfig.from_dict(apply_overrides(raw, overrides))
        if self.config_path in _WARNED_MISSING or os.environ.get("RANK", "0") != "0":
            return config  # said once, by one process
        _WARNED_MISSING.add(self.config_path)
        warn(
            f"warning: {shown(self.config_path)} is missing; using the configuration stored in "
            f"{newest.path.name} (`fixedfirst train --resume --out {shown(self.path)}` writes it "
            "back)"
        )
        return config

    def has_checkpoints(self) -> bool:
        """Whether any checkpoint directory exists (complete or not)."""
        path = self.checkpoints_path
        return path.is_dir() and any(p.name.startswith("step-") for p in path.iterdir())

    def check_new(self, force: bool = False) -> None:
        """Refuse to start a fresh run where one already is, in a data directory or among
        files fixedfirst did not write (`force`: beside them, never over one); make the
        directory otherwise.

        A directory whose run never saved a checkpoint (it failed before its first one, e.g.
        on a value only training can find wrong) holds nothing a resume could use: it may be
        started again, with a corrected configuration, without deleting it by hand."""
        if self.path.exists() and not self.path.is_dir():
            raise UserError(f"--out {shown(self.path)} exists and is not a directory")
        if self.holds_run() and self.has_checkpoints():
            raise UserError(
                f"{shown(self.path)} already holds a run; pass --resume to continue it, "
                "or choose another --out"
            )
        if is_prepared(self.path):
            raise UserError(
                f"--out {shown(self.path)} is a prepared data directory; a run goes in a "
                "directory of its own (choose another --out)"
            )
        foreign = self.foreign_files()
        if foreign and not force:
            raise UserError(
                f"--out {shown(self.path)} holds files fixedfirst did not write "
                f"({', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}); nothing was "
                "written (choose a new or empty directory, or pass --force to train beside them)"
            )
        clashing = [name for name in foreign if name in RUN_FILES + SINK_FILES]
        if clashing:
            raise UserError(
                f"--out {shown(self.path)} holds {', '.join(clashing)}, which fixedfirst did not "
                "write and a run writes; --force never replaces them: move them elsewhere"
            )
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            probe = self.path / ".write-test"
            probe.write_text("")
            probe.unlink()
        except OSError as e:
            raise UserError(f"cannot write to {shown(self.path)}: {e.strerror or e}") from None

    def foreign_files(self) -> list[str]:
        """The names in the directory that fixedfirst did not write: anything but a run's own
        files, and the run's own names too unless config.toml carries CONFIG_MARK."""
        if not self.path.is_dir():
            return []
        ours = self._config_is_ours()
        return sorted(
            name
            for name in os.listdir(self.path)
            if not (
                name in SINK_FILES
                or name == locks.LOCK_FILE
                or OWN_TEMPORARY.fullmatch(name)
                or (ours and name in RUN_FILES)
            )
        )

    def _config_is_ours(self) -> bool:
        try:
            with open(self.config_path, encoding="utf-8") as f:
                return f.readline() == CONFIG_MARK
        except (OSError, UnicodeDecodeError):
            return False

    def check_writable_layout(self) -> None:
        """Refuse a run whose checkpoints/ or tokenizer/ is in the way as something else."""
        for path in (self.checkpoints_path, self.tokenizer_path):
            if path.exists() and not path.is_dir():
                raise UserError(
                    f"{shown(path)} exists and is not a directory; the run keeps its "
                    f"{path.name} there: move that file elsewhere"
                )

    def open_for_writing(self, config: RunConfig, resume: bool, force: bool = False) -> bool:
        """Check that `config` may start (or resume) here and take the run's lock; True when
        an earlier attempt that saved no checkpoint is being started over."""
        if resume:
            saved = self.saved_config()
            locks.acquire(self.path, "train --resume")
        else:
            self.check_new(force)
            locks.acquire(self.path, "train")
        try:
            self.check_writable_layout()
            if resume:
                check_resume(saved, config, self.path)
                return False
            if self.has_checkpoints():  # another process started it before we took the lock
                self.check_new(force)
            return self.holds_run() and self._config_is_ours()
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
        write_text_atomic(self.config_path, CONFIG_MARK + to_toml(stored(config)))


def config_record(config: RunConfig) -> dict[str, Any]:
    """What a checkpoint's meta.json records of the configuration (`identity.py`)."""
    return {CONFIG_KEY: stored(config).to_dict()}


def stored(config: RunConfig) -> RunConfig:
    """`config` as a run directory stores it: data.path and model.checkpoint absolute
    (docs/design.md §7)."""
    if config.data.path is not None:
        config = replace(config, data=replace(config.data, path=absolute(config.data.path)))
    if config.model.checkpoint is not None:
        model = replace(config.model, checkpoint=absolute(config.model.checkpoint))
        config = replace(config, model=model)
    return config


def check_resume(saved: RunConfig, new: RunConfig, run: Path) -> None:
    """Refuse a resume whose configuration (a CONFIG.toml, --set) changes what defines the run
    against its config.toml, or moves the axis of curves it continues."""
    if run_defining_differences(saved, new):
        raise UserError(
            "cannot resume: the configuration given changes what defines the run (against its "
            f"config.toml): {describe_differences(saved, new)}; a resume continues the same run: "
            f"leave them as they are, or branch a new run from its checkpoint: `fixedfirst branch "
            f"{shown(run)} --out NEW_RUN --set KEY=VALUE`"
        )
    # Logging may change on resume, but not the x-axis of curves that go on in the same place.
    continued = [name for name in new.train.log_to if name in saved.train.log_to]
    if continued and new.train.log_axis != saved.train.log_axis:
        raise UserError(
            f"train.log_axis = {new.train.log_axis!r}: the run's {' and '.join(continued)} curves "
            f"are on the {saved.train.log_axis!r} axis and a resume continues them; keep "
            f"log_axis = {saved.train.log_axis!r}"
        )
