"""Open what is to be served: a training run or an export, as one model plus its tokenizer.

`fixedfirst generate`, `inspect`, `downstream` and the lm-evaluation-harness model all take
either a run directory (a checkpoint of it: the newest by default) or a directory written by
`fixedfirst export`, of fixedfirst's own looped transformer or of a transformers looped
architecture (`[model] kind = "transformers"`), or a Hugging Face checkpoint directory of a looped
architecture (what `[model] checkpoint = DIR` starts a run from: config.json, safetensors weights
and the tokenizer's files, built as `fixedfirst eval CHECKPOINT_DIR` builds it, served by default
at the depth it was trained at); this module tells them apart and returns the same thing for all:
a model that serving decodes (model/serving.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from fixedfirst.config import RunConfig
from fixedfirst.config.checkpoints import is_checkpoint_directory
from fixedfirst.data.tokenizer import Tokenizer, load_tokenizer, missing_files
from fixedfirst.errors import UserError
from fixedfirst.files.paths import shown
from fixedfirst.model.kinds import LoopedModel
from fixedfirst.runs.directory import RunDir
from fixedfirst.runs.exported import (
    CONFIG_FILE,
    TOKENIZER_DIR,
    WEIGHTS_FILE,
    is_export,
    load,
    read_export,
)
from fixedfirst.runs.opening import LoadedRun, load_any_run
from fixedfirst.runs.tokenizer import run_tokenizer


@dataclass
class Served:
    model: LoopedModel
    """In eval mode."""
    tokenizer: Tokenizer | None
    """None only when asked for with require_tokenizer=False (runs on synthetic data)."""
    default_depth: int
    """The deepest depth the model trained at: the serving depth when none is asked for."""
    description: str
    """Where the weights came from, for messages and result files."""
    run: LoadedRun[LoopedModel] | None = None
    """The run and checkpoint, when served from a run directory."""


def deepest_training_depth(config: RunConfig) -> int:
    """The largest depth the run's schedule draws: `depth` for fixed, else k_max (every other
    schedule draws from 1..k_max or clips at it)."""
    schedule = config.schedule
    return schedule.depth if schedule.kind == "fixed" else schedule.k_max


def load_served(
    path: str | Path,
    checkpoint: int | None = None,
    device: str | torch.device = "cpu",
    require_tokenizer: bool = True,
    data: str | None = None,
) -> Served:
    """A run directory (at `checkpoint`, default the newest) or an export directory; `data`:
    where a run's data is now, when it moved (needed only by a run without RUN/tokenizer)."""
    path = Path(path)
    if is_checkpoint_directory(path):
        return served_checkpoint(path, checkpoint, device, require_tokenizer, data)
    if is_export(path):
        if checkpoint is not None:
            raise UserError(f"{path} is an export of one checkpoint; --checkpoint does not apply")
        if data is not None:
            raise UserError(f"{path} is an export (it holds its tokenizer); --data does not apply")
        config = read_export(path)
        model = load(path, device)
        tokenizer = None
        if config.get("tokenizer") is not None:
            missing = missing_files(path / TOKENIZER_DIR, config["tokenizer"].get("kind"))
            if missing:
                raise UserError(
                    f"{shown(path)}: this export's tokenizer ({shown(path / TOKENIZER_DIR)}/"
                    f"{missing[0]}) is missing; copy the export again with its {TOKENIZER_DIR}/, "
                    "or export the run again"
                )
            tokenizer = load_tokenizer(path / TOKENIZER_DIR)
        elif require_tokenizer:
            raise UserError(
                f"{path}: this export has no tokenizer (its run trained on data without text)"
            )
        source = config.get("source", {})
        return Served(
            model,
            tokenizer,
            int(config.get("default_depth", 1)),
            f"{path} (export of {source.get('run')} step {source.get('step')})",
        )
    if (path / WEIGHTS_FILE).is_file() and not RunDir(path).config_path.is_file():
        raise UserError(
            f"{shown(path)}: an export's weights ({WEIGHTS_FILE}) without its {CONFIG_FILE}; "
            f"copy the export again whole, or export the run again (`fixedfirst export RUN "
            f"--out {shown(path)}`)"
        )
    if path.is_dir() and not RunDir(path).config_path.is_file() and not has_checkpoints(path):
        raise UserError(
            f"{shown(path)} is neither a run (config.toml), an export (`fixedfirst export`'s "
            "config.json) nor a Hugging Face checkpoint directory (config.json naming a "
            "model_type, safetensors weights, tokenizer files); name one of those"
        )
    loaded = load_any_run(path, checkpoint, device, data=data)
    tokenizer = run_tokenizer(
        loaded.config,
        loaded.checkpoint.meta.get("data"),
        required=require_tokenizer,
        run_dir=path,
        data=data,
    )
    return Served(
        loaded.model,
        tokenizer,
        deepest_training_depth(loaded.config),
        f"{path} step {loaded.checkpoint.step}",
        loaded,
    )


def has_checkpoints(path: Path) -> bool:
    """Whether a directory without config.toml still holds a run's checkpoints (read from them)."""
    return any(RunDir(path).checkpoints_path.glob("*"))


def served_checkpoint(
    path: Path,
    checkpoint: int | None,
    device: str | torch.device,
    require_tokenizer: bool,
    data: str | None,
) -> Served:
    """A Hugging Face checkpoint directory, its model built as `fixedfirst eval` builds it
    (`initial_model` of `[model] checkpoint = path`), served by default at the depth it was
    trained at (its config.json's passes), with the tokenizer saved beside its weights."""
    from fixedfirst.config.run import model_section
    from fixedfirst.data.tokenizer import CheckpointTokenizer, checkpoint_tokenizer
    from fixedfirst.model.kinds import initial_model

    for flag, value in (("--checkpoint", checkpoint), ("--data", data)):
        if value is not None:
            raise UserError(
                f"{flag} is for a run; {shown(path)} is a checkpoint directory (one set of "
                "weights, its tokenizer beside them)"
            )
    section = model_section({"checkpoint": str(path)})
    tokenizer: Tokenizer | None = None
    if require_tokenizer or any((path / name).is_file() for name in CheckpointTokenizer.FILES):
        tokenizer = checkpoint_tokenizer(path)
    model = initial_model(section).to(device).eval()
    depth = section.checkpoint_depth or 1
    return Served(model, tokenizer, depth, f"{path} (checkpoint trained at depth {depth})")
