"""Read what `fixedfirst export` wrote: an exported directory's config.json and its model.

    DIR/
      model.safetensors   the weights of one checkpoint (each tied tensor once)
      config.json         what the model is and where it came from (below)
      tokenizer/          the tokenizer's files (absent for runs on data without text)

config.json: {"format": "fixedfirst-export", "version": 1, "model": {the run's [model]: the
ModelConfig fields of fixedfirst's own looped transformer, or kind, architecture and the table
"transformers" of a transformers looped architecture},
"tokenizer": {"kind", "vocab_size", "start_id", "stop_id", "directory"} or null,
"default_depth": the deepest depth the run trained at, "source": {run, step, tokens, schedule,
weights_sha256}, "fixedfirst_version"}.

An export holds no optimizer, RNG or data state: `fixedfirst.load(DIR)` needs only this directory
and returns the model in eval mode, ready for `model(tokens, depth)`, `generate` or the KL-exit
decoder. Writing an export is `export/writer.py`.

model.safetensors is the checkpoint's weights file, byte for byte (the same tensors written the
same way), so `source.weights_sha256` is its SHA-256 too, and loading checks it, as loading a
checkpoint checks its own: a changed file (a bad copy, a flipped bit) is refused before it is
served, not generated from. An export without the key (written by hand) is read unchecked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from fixedfirst.config.run import model_section
from fixedfirst.errors import UserError
from fixedfirst.files.paths import shown
from fixedfirst.model.kinds import LoopedModel, build_model

EXPORT_FORMAT = "fixedfirst-export"
EXPORT_VERSION = 1
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_DIR = "tokenizer"


def is_export(path: str | Path) -> bool:
    """Whether `path` looks like an export (it has a config.json), not a run directory."""
    return (Path(path) / CONFIG_FILE).is_file()


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
    if isinstance(config, dict) and config.get("model_type") == "fixedfirst":
        raise UserError(
            f"{directory} is a transformers export (--format hf): load it with "
            "AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True), or export the "
            "run again without --format hf for fixedfirst"
        )
    if not isinstance(config, dict) or config.get("format") != EXPORT_FORMAT:
        raise UserError(f"{path}: not written by `fixedfirst export`")
    if config.get("version") != EXPORT_VERSION:
        raise UserError(
            f"{path}: export version {config.get('version')}, this fixedfirst reads "
            f"version {EXPORT_VERSION}"
        )
    return config


def check_weights(directory: Path, config: dict[str, Any]) -> None:
    """Refuse an export whose model.safetensors is not the file config.json records."""
    from fixedfirst.runs.checkpoint import sha256

    source = config.get("source")
    if not isinstance(source, dict):
        return
    recorded = source.get("weights_sha256")
    weights = directory / WEIGHTS_FILE
    if recorded is None or not weights.is_file():
        return  # no record to check against; a missing file is the reader's to say
    if sha256(weights) != recorded:
        run = source.get("run") or "RUN"
        raise UserError(
            f"{shown(weights)}: changed since `fixedfirst export` wrote it (its SHA-256 is not "
            f"the weights_sha256 in {CONFIG_FILE}: a bad copy or a flipped bit); copy the "
            f"export again, or export the run again (`fixedfirst export {shown(run)} --out "
            "NEW_DIR`)"
        )


def load(directory: str | Path, device: str | torch.device = "cpu") -> LoopedModel:
    """The exported model, in eval mode on `device`, for inference at any depth; a run
    directory works too (its newest valid checkpoint), as for `load_served`."""
    from fixedfirst.runs.checkpoint import MODEL_FILE, Checkpoint

    assert MODEL_FILE == WEIGHTS_FILE
    directory = Path(directory)
    if directory.is_dir() and not is_export(directory):
        from fixedfirst.runs.directory import RunDir
        from fixedfirst.runs.opening import load_any_run

        if RunDir(directory).config_path.is_file():
            return load_any_run(directory, device=device).model
    config = read_export(directory)
    if not isinstance(config.get("model"), dict):
        raise UserError(f"{directory / CONFIG_FILE}: no model configuration")
    check_weights(directory, config)
    model = build_model(model_section(dict(config["model"])))
    # The same reader as a training checkpoint's weights: names and shapes checked, tied
    # tensors stored once; an export's model.safetensors has the checkpoint's layout.
    Checkpoint(directory, meta={}).load_model(model)
    return model.to(device).eval()
