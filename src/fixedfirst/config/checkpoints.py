"""A Hugging Face checkpoint directory as a run's model: `[model] checkpoint = "DIR"`.

A looped model trained elsewhere comes as a directory: config.json, safetensors weights (one
file, or shards named by model.safetensors.index.json) and the tokenizer's files. A run may
start from it when fixedfirst has a depth handle for its class: a transformers looped
architecture of `ARCHITECTURES` (config/architectures.py), or fixedfirst's own Hugging Face
export (`fixedfirst export --format hf`, model_type "fixedfirst"), which is read into our own
looped transformer rather than run as remote code.

This module reads config.json only, and turns it into the [model] a run writes: the
architecture and the table [model.transformers] completed by its configuration class (or our
own [model] keys), and the depth the checkpoint was trained at (`checkpoint_depth`, where a
finishing run's control trains). Keys the user gives besides `checkpoint` must agree with the
directory. A run's config.toml records all of it with the weights' checksum
(`checkpoint_sha256`, runs/identity.py), and such a complete record is read as it is, without
the directory: a finished run stays readable when its checkpoint has moved. The weights are
read by model/pretrained.py. `check_checkpoint_keys` checks the three keys as either [model]
section is built (config/sections.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, ClassVar, Protocol

from fixedfirst.config.architectures import (
    ARCHITECTURES,
    architecture_fields,
    looped_architecture,
    model_class,
    quiet_transformers,
    refusals,
)
from fixedfirst.config.limits import MAX_DEPTH
from fixedfirst.config.schema import require
from fixedfirst.config.schema import shown as shown_value
from fixedfirst.errors import UserError
from fixedfirst.files.paths import shown

CONFIG_FILE = "config.json"
OWN_MODEL_TYPE = "fixedfirst"
"""The model_type of fixedfirst's own Hugging Face export."""
OWN_DEPTH_KEY = "depth"
"""Our export's config.json key of the depth it serves by default."""
OWN_EXPORT_KEYS: dict[str, str] = {
    "vocab_size": "vocab_size",
    "d_model": "hidden_size",
    "n_heads": "num_attention_heads",
    "n_prelude": "n_prelude",
    "n_core": "n_core",
    "n_coda": "n_coda",
    "max_seq_len": "max_position_embeddings",
    "d_ff": "intermediate_size",
    "mlp": "mlp",
    "norm": "norm",
    "injection": "injection",
    "state_init": "state_init",
    "eval_seed": "eval_seed",
    "coda_norm": "coda_norm",
    "rope_base": "rope_base",
    "tie_embeddings": "tie_word_embeddings",
}
"""fixedfirst's [model] keys -> the names our export's config.json gives them (transformers'
usual names where there is one); export/hf/export.py writes them with this table."""
RECORDED = ("checkpoint_sha256",)
"""The key a run writes once it has read the checkpoint: with it, [model] is a complete record."""


class CheckpointKeys(Protocol):
    """A [model] section's checkpoint keys (ModelConfig's and TransformersModelConfig's)."""

    SECTION: ClassVar[str]
    checkpoint: str | None
    checkpoint_sha256: str | None
    checkpoint_depth: int | None


def check_checkpoint_keys(section: CheckpointKeys) -> None:
    """The three `checkpoint` keys of a [model]: a directory, and what a run records of it
    (its weights' checksum, its depth), which mean nothing without it."""
    s = section.SECTION
    if section.checkpoint is None:
        for key in ("checkpoint_sha256", "checkpoint_depth"):
            require(
                getattr(section, key) is None,
                f"{s}.{key}",
                "describes the checkpoint a run starts from, and model.checkpoint is unset; "
                "leave it out",
            )
        return
    require(
        section.checkpoint.strip() != "",
        f"{s}.checkpoint",
        "is empty; name the checkpoint directory (config.json, safetensors weights, tokenizer)",
    )
    digest = section.checkpoint_sha256
    require(
        digest is None or re.fullmatch(r"[0-9a-f]{64}", digest) is not None,
        f"{s}.checkpoint_sha256",
        f"must be 64 lowercase hexadecimal digits (a SHA-256), got {digest!r}; leave it out "
        "and fixedfirst computes it",
    )
    depth = section.checkpoint_depth
    require(
        depth is None or 1 <= depth <= MAX_DEPTH,
        f"{s}.checkpoint_depth",
        f"must be in 1..{MAX_DEPTH}, got {depth}",
    )


def is_checkpoint_directory(path: str | Path) -> bool:
    """Whether `path` is a Hugging Face checkpoint directory (a config.json naming a
    model_type), not a run (config.toml) nor an export in fixedfirst's own format."""
    path = Path(path)
    if not (path / CONFIG_FILE).is_file() or (path / "config.toml").is_file():
        return False
    try:
        config = json.loads((path / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and isinstance(config.get("model_type"), str)


def read_config_json(directory: str | Path) -> dict[str, Any]:
    """DIR/config.json, or one line saying why DIR is not a checkpoint directory."""
    path = Path(directory)
    where = f"model.checkpoint = {shown(path)}"
    if not path.exists():
        raise UserError(f"{where}: no such directory")
    if not path.is_dir():
        raise UserError(
            f"{where}: not a directory; name the checkpoint directory (config.json, "
            "safetensors weights, tokenizer files)"
        )
    file = path / CONFIG_FILE
    if not file.is_file():
        raise UserError(
            f"{where}: not a checkpoint directory (no {CONFIG_FILE}); name a directory written "
            "by save_pretrained, with config.json, safetensors weights and tokenizer files"
        )
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UserError(f"{shown(file)}: unreadable ({e})") from None
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        raise UserError(
            f"{shown(file)}: not a transformers model configuration (it names no model_type)"
        )
    return config


def checkpoint_model(raw: dict[str, Any]) -> dict[str, Any]:
    """[model] as the user wrote it with `checkpoint = DIR`, completed from DIR/config.json: the
    raw keys of our own [model] (our export), or `kind`, `architecture` and the table
    [model.transformers] of a transformers architecture; always `checkpoint_depth`. A run's own
    record (with `checkpoint_sha256`) is returned as it is."""
    directory = raw["checkpoint"]
    if not isinstance(directory, str) or not directory.strip():
        return raw  # refused by name when the section is built
    if any(raw.get(key) is not None for key in RECORDED):
        return raw
    config = read_config_json(directory)
    if config["model_type"] == OWN_MODEL_TYPE:
        completed = own_export_model(config)
        foreign = [key for key in ("kind", "architecture", "transformers") if key in raw]
        if foreign:
            raise UserError(
                f"model.{foreign[0]}: {shown(directory)} is fixedfirst's own Hugging Face "
                "export, read into our looped transformer; leave model.kind, architecture and "
                "[model.transformers] out"
            )
    else:
        completed = transformers_model(directory, config)
    return agreed(raw, completed, directory)


def own_export_model(config: dict[str, Any]) -> dict[str, Any]:
    """Our [model] keys from our export's config.json."""
    missing = [name for name in OWN_EXPORT_KEYS.values() if name not in config]
    if missing:
        raise UserError(
            f"{CONFIG_FILE} of a fixedfirst export lacks {missing[0]}; export the run again "
            "(`fixedfirst export RUN --format hf --out DIR`)"
        )
    model = {key: config[name] for key, name in OWN_EXPORT_KEYS.items()}
    model["checkpoint_depth"] = config.get(OWN_DEPTH_KEY, 1)
    return model


def transformers_model(directory: str, config: dict[str, Any]) -> dict[str, Any]:
    """`kind`, `architecture`, the completed table and the trained depth of a transformers
    checkpoint whose class has a depth handle."""
    names = config.get("architectures")
    if not isinstance(names, list) or not names or not isinstance(names[0], str):
        raise UserError(
            f"{shown(Path(directory) / CONFIG_FILE)}: names no architecture (its "
            "'architectures' list is missing); save the model with save_pretrained"
        )
    name = names[0]
    if name not in ARCHITECTURES:
        known = ", ".join(ARCHITECTURES)
        raise UserError(
            f"model.checkpoint = {shown(directory)} holds transformers' {name} "
            f"(model_type {config['model_type']!r}), which has no depth handle: fixedfirst "
            f"finishes the looped architectures whose depth it can set ({known}) and its own "
            "Hugging Face export"
        )
    architecture = looped_architecture(name)
    config_class = model_class(architecture).config_class
    try:
        with quiet_transformers():
            configuration = config_class.from_dict(config)
    except (TypeError, ValueError, refusals()) as e:
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        raise UserError(
            f"{shown(Path(directory) / CONFIG_FILE)}: {config_class.__name__} refuses it: "
            f"{lines[-1] if lines else type(e).__name__}"
        ) from None
    table = {}
    for key in architecture_fields(config_class):
        value = getattr(configuration, key)
        if key != architecture.depth_key and value is not None:
            table[key] = list(value) if isinstance(value, tuple) else value
    return {
        "kind": "transformers",
        "architecture": name,
        "transformers": table,
        "checkpoint_depth": int(getattr(configuration, architecture.depth_key)),
    }


def agreed(given: dict[str, Any], completed: dict[str, Any], directory: str) -> dict[str, Any]:
    """`completed` with the user's `given` keys on top, each of which must say what the
    checkpoint says: its config.json is the model's configuration."""
    for key, value in given.items():
        if key == "checkpoint" or key not in completed:
            continue
        if isinstance(value, dict) and isinstance(completed[key], dict):
            for sub, inner in value.items():
                _same(f"model.{key}.{sub}", inner, completed[key].get(sub), directory)
        else:
            _same(f"model.{key}", value, completed[key], directory)
    return {**given, **completed}


def _same(key: str, given: Any, found: Any, directory: str) -> None:
    if given == found:
        return
    said = "does not set it" if found is None else f"says {shown_value(found)}"
    raise UserError(
        f"{key} = {shown_value(given)}, but the checkpoint's {CONFIG_FILE} "
        f"({shown(directory)}) {said}: with model.checkpoint the model is the checkpoint's; "
        "leave the key out"
    )
