"""Export a run for inference: its weights, model configuration and tokenizer in one directory.

    DIR/
      model.safetensors   the weights of one checkpoint (each tied tensor once)
      config.json         what the model is and where it came from (below)
      tokenizer/          the tokenizer's files (absent for runs on synthetic data)

config.json: {"format": "fixedfirst-export", "version": 1, "model": {ModelConfig fields},
"tokenizer": {"kind", "vocab_size", "start_id", "stop_id", "directory"} or null,
"default_depth": the deepest depth the run trained at, "source": {run, step, tokens, schedule,
weights_sha256}, "fixedfirst_version"}.

An export holds no optimizer, RNG or data state: `fixedfirst.load(DIR)` needs only this directory
and returns the model in eval mode, ready for `model(tokens, depth)`, `generate` or the KL-exit
decoder. The directory is written under a temporary name and renamed when complete, and a
non-empty DIR is refused, so an export never overwrites anything.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from fixedfirst.config import ModelConfig, build_section
from fixedfirst.errors import UserError
from fixedfirst.model import LoopedTransformer

EXPORT_FORMAT = "fixedfirst-export"
EXPORT_VERSION = 1
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_DIR = "tokenizer"


def is_export(path: str | Path) -> bool:
    """Whether `path` looks like an export (it has a config.json), not a run directory."""
    return (Path(path) / CONFIG_FILE).is_file()


def check_out_dir(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        raise UserError(f"--out {out}: directory exists and is not empty; nothing was written")
    if not out.parent.is_dir():
        raise UserError(f"--out {out}: directory {out.parent} does not exist")


def export_run(run: str | Path, out: str | Path, step: int | None = None) -> dict[str, Any]:
    """Write the run's checkpoint at `step` (default: the newest) into `out`; return config.json."""
    from fixedfirst import __version__
    from fixedfirst.schedules import describe
    from fixedfirst.serve.loading import deepest_training_depth, load_served
    from fixedfirst.train.checkpoint import MODEL_FILE, tied_aliases

    out = Path(out)
    check_out_dir(out)
    if is_export(run):
        raise UserError(f"{run} is already an export; export takes a run directory")
    served = load_served(run, step, require_tokenizer=False)
    assert served.run is not None
    loaded = served.run
    tokenizer = served.tokenizer
    config = {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "model": loaded.config.to_dict()["model"],
        "tokenizer": None
        if tokenizer is None
        else {**tokenizer.describe(), "directory": TOKENIZER_DIR},
        "default_depth": deepest_training_depth(loaded.config),
        "source": {
            "run": str(run),
            "step": loaded.checkpoint.step,
            "tokens": loaded.checkpoint.meta.get("tokens"),
            "schedule": describe(loaded.config.schedule),
            "weights_sha256": loaded.checkpoint.meta["files"][MODEL_FILE],
        },
        "fixedfirst_version": __version__,
    }
    aliases = tied_aliases(loaded.model)
    weights = {
        k: v.detach().cpu().contiguous()
        for k, v in loaded.model.state_dict().items()
        if k not in aliases
    }
    tmp = out.with_name(f".tmp-{out.name}")
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        save_file(weights, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
        if tokenizer is not None:
            tokenizer.save(tmp / TOKENIZER_DIR)
        (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
        if out.is_dir():
            out.rmdir()  # empty (checked above)
        os.replace(tmp, out)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UserError(f"cannot write {out} ({e.strerror or e})") from None
    return config


def read_export(directory: str | Path) -> dict[str, Any]:
    """config.json of an export, checked to be one this version reads."""
    directory = Path(directory)
    if not directory.is_dir():
        raise UserError(f"{directory}: no such directory")
    path = directory / CONFIG_FILE
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        raise UserError(
            f"{directory}: not an export ({CONFIG_FILE} missing or unreadable); "
            "make one with `fixedfirst export RUN --out DIR`"
        ) from None
    if not isinstance(config, dict) or config.get("format") != EXPORT_FORMAT:
        raise UserError(f"{path}: not written by `fixedfirst export`")
    if config.get("version") != EXPORT_VERSION:
        raise UserError(
            f"{path}: export version {config.get('version')}, this fixedfirst reads "
            f"version {EXPORT_VERSION}"
        )
    return config


def load(directory: str | Path, device: str | torch.device = "cpu") -> LoopedTransformer:
    """The exported model, in eval mode on `device`, for inference at any depth."""
    from fixedfirst.train.checkpoint import MODEL_FILE, Checkpoint

    assert MODEL_FILE == WEIGHTS_FILE
    directory = Path(directory)
    config = read_export(directory)
    if not isinstance(config.get("model"), dict):
        raise UserError(f"{directory / CONFIG_FILE}: no model configuration")
    model = LoopedTransformer(build_section(ModelConfig, config["model"]))
    # The same reader as a training checkpoint's weights: names and shapes checked, tied
    # tensors stored once; an export's model.safetensors has the checkpoint's layout.
    Checkpoint(directory, meta={}).load_model(model)
    return model.to(device).eval()
