"""The run directory (docs/design.md §7) and the rules for starting or resuming a run in it.

    RUN/config.toml     the resolved configuration
    RUN/metrics.jsonl   training and evaluation records
    RUN/summary.json    the closing summary
    RUN/checkpoints/    step-NNNNNNN/ directories
    RUN/tensorboard/, RUN/wandb/, RUN/wandb-run-id    with train.log_to (`sinks.py`)

A directory that already holds a run is never written without `--resume`, and a resume may not
change what defines the run: the model, the data, the schedule, or anything that moves the
schedule's steps (seed, budgets, batch and sequence length). Changing logging, checkpointing or
evaluation settings on resume is fine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fixedfirst.config import RunConfig, load_config, to_toml
from fixedfirst.errors import UserError

RUN_DEFINING_TRAIN_KEYS = ("seed", "tokens", "flops", "batch_size", "seq_len", "grad_depth")
RUN_DEFINING_SECTIONS = ("model", "data", "schedule")


class RunDir:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    config_path = property(lambda self: self.path / "config.toml")
    metrics_path = property(lambda self: self.path / "metrics.jsonl")
    summary_path = property(lambda self: self.path / "summary.json")
    checkpoints_path = property(lambda self: self.path / "checkpoints")

    def holds_run(self) -> bool:
        return any(p.exists() for p in (self.config_path, self.metrics_path, self.checkpoints_path))

    def saved_config(self) -> RunConfig:
        if not self.config_path.is_file():
            raise UserError(f"{self.path} holds no run (no config.toml); train into it first")
        return load_config(self.config_path)

    def check_new(self) -> None:
        """Refuse to start a fresh run where one already is; make the directory otherwise."""
        if self.path.exists() and not self.path.is_dir():
            raise UserError(f"--out {self.path} exists and is not a directory")
        if self.holds_run():
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
        tmp = self.config_path.with_suffix(".toml.tmp")
        tmp.write_text(to_toml(config))
        tmp.replace(self.config_path)


def run_defining_differences(saved: RunConfig, new: RunConfig) -> list[str]:
    """The `section.key` names whose values differ and that a resume may not change. Both
    configurations are compared resolved (a data kind's options with their defaults), as the
    run directory stores them."""
    from fixedfirst.data.registry import resolve_data

    saved, new = resolve_data(saved), resolve_data(new)

    def flat(config: RunConfig) -> dict[str, Any]:
        d = config.to_dict()
        out = {f"{s}.{k}": v for s in RUN_DEFINING_SECTIONS for k, v in d[s].items()}
        out.update({f"train.{k}": d["train"].get(k) for k in RUN_DEFINING_TRAIN_KEYS})
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
