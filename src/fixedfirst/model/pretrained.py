"""The weights of a Hugging Face checkpoint directory a run starts from (`[model] checkpoint`).

A checkpoint's weights are safetensors: one model.safetensors, or shards named by
model.safetensors.index.json. Before anything is loaded, `weight_files` finds them and checks
that each is whole (present, its header readable, the file as long as the header says, every
tensor the index names inside the shard it names), so a missing or truncated shard is one line
rather than a failure deep in a loader. `weights_sha256` is the checkpoint's identity: the
SHA-256 of each weight file, combined, recorded by a run so that a resume against other weights
is refused (runs/identity.py). Pickled weights (pytorch_model.bin) are never read: unpickling
can run code.

`load_own_export` reads fixedfirst's own Hugging Face export into our looped transformer, tensor
by tensor (no second copy of the model in memory), with the evaluation initial state the export
stores; a transformers architecture is loaded by its own `from_pretrained`
(model/transformers_loop.py), which converts the names it saves under.
"""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from fixedfirst.config import ModelConfig
from fixedfirst.errors import UserError
from fixedfirst.files.paths import shown
from fixedfirst.model.looped import LoopedTransformer
from fixedfirst.model.memory import check_fits

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
PICKLED = ("pytorch_model.bin", "pytorch_model.bin.index.json")
EVAL_STATE = "eval_state"
"""The export's stored evaluation initial state (docs/design.md §9), a buffer of ours."""
HEADER_LIMIT = 100 << 20
"""A safetensors header longer than this is no header: the file is damaged."""


def weight_files(directory: str | Path) -> list[Path]:
    """The checkpoint's weight files, each checked whole; one line for a missing, truncated or
    damaged one, or for a directory without safetensors weights."""
    directory = Path(directory)
    if not directory.is_dir():
        raise UserError(
            f"model.checkpoint = {shown(directory)}: no such directory (a checkpoint that moved: "
            "--set model.checkpoint=WHERE_IT_IS_NOW)"
        )
    index = directory / INDEX_FILE
    if index.is_file():
        return _sharded(directory, index)
    single = directory / SINGLE_FILE
    if single.is_file():
        _tensor_names(single)
        return [single]
    pickled = [name for name in PICKLED if (directory / name).is_file()]
    if pickled:
        raise UserError(
            f"{shown(directory)}: its weights are {pickled[0]} (a pickle, which can run code "
            "when read); fixedfirst reads safetensors only: save the model again with "
            "save_pretrained(DIR, safe_serialization=True)"
        )
    raise UserError(
        f"{shown(directory)}: no weights ({SINGLE_FILE}, or {INDEX_FILE} and its shards); "
        "name the directory save_pretrained wrote"
    )


def _sharded(directory: Path, index: Path) -> list[Path]:
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        shards = sorted(set(weight_map.values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise UserError(
            f"{shown(index)}: unreadable (no 'weight_map' of tensor names to shard files)"
        ) from None
    files = []
    for name in shards:
        path = directory / name
        if not path.is_file():
            named = sum(1 for shard in weight_map.values() if shard == name)
            raise UserError(
                f"{shown(path)} is missing: {INDEX_FILE} puts {named} tensor(s) there; copy "
                "the checkpoint again, every shard"
            )
        held = _tensor_names(path)
        absent = sorted(t for t, shard in weight_map.items() if shard == name and t not in held)
        if absent:
            raise UserError(
                f"{shown(path)} lacks {absent[0]}, which {INDEX_FILE} puts there; the shard "
                "is not the one the index was written with: copy the checkpoint again"
            )
        files.append(path)
    return files


def _tensor_names(path: Path) -> set[str]:
    """The tensors a safetensors file holds, read from its header; refused when the file is
    shorter than the header says (a copy cut short) or its header is unreadable."""
    size = path.stat().st_size
    damaged = f"{shown(path)}: not a whole safetensors file"
    again = "copy the checkpoint again"
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise UserError(f"{damaged} ({size} bytes, no header); {again}")
        length = int.from_bytes(head, "little")
        if length > min(size - 8, HEADER_LIMIT):
            raise UserError(
                f"{damaged} (its header would be {length:,} bytes of {size:,}); {again}"
            )
        try:
            header = json.loads(f.read(length))
            ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
        except (ValueError, KeyError, TypeError, IndexError, AttributeError):
            raise UserError(f"{damaged} (its header is unreadable); {again}") from None
    needed = 8 + length + max(ends, default=0)
    if size < needed:
        raise UserError(
            f"{shown(path)} is truncated: {size:,} bytes, its header describes {needed:,}; {again}"
        )
    return {k for k in header if k != "__metadata__"}


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


_HASHED: dict[tuple[tuple[str, int, int], ...], str] = {}
"""Checksums this process computed, by (file, size, modification time) of every weight file: a
command that checks the same checkpoint for several runs reads its weights once."""


def weights_sha256(directory: str | Path) -> str:
    """The identity of the checkpoint's weights: the SHA-256 of the list of its weight files'
    names and SHA-256s (files hashed side by side: hashlib releases the interpreter lock)."""
    files = weight_files(directory)
    key = tuple(
        (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
        for path, stat in ((path, path.stat()) for path in files)
    )
    if key not in _HASHED:
        with ThreadPoolExecutor(max_workers=min(8, len(files))) as pool:
            digests = list(pool.map(_file_sha256, files))
        listed = [[path.name, digest] for path, digest in zip(files, digests, strict=True)]
        _HASHED[key] = hashlib.sha256(json.dumps(listed).encode()).hexdigest()
    return _HASHED[key]


def load_own_export(config: ModelConfig) -> LoopedTransformer:
    """Our looped transformer with the weights of the export `config.checkpoint` (on the
    CPU): every parameter from its model.safetensors, checked by name and shape."""
    from safetensors import safe_open

    assert config.checkpoint is not None
    (path,) = weight_files(config.checkpoint)
    check_fits(config, torch.device("cpu"))
    model = LoopedTransformer(config)
    targets = dict(model.named_parameters())  # each tied tensor once, under its first name
    with safe_open(str(path), framework="pt") as f:
        names = set(f.keys())
        missing = sorted(set(targets) - names)
        unexpected = sorted(names - set(targets) - {EVAL_STATE})
        if missing or unexpected:
            what = f"{missing[0]} missing" if missing else f"unexpected {unexpected[0]}"
            raise UserError(
                f"{shown(path)}: its weights do not fit the model its config.json describes "
                f"({what}); export the run again"
            )
        with torch.no_grad():
            for name, parameter in targets.items():
                _copy(parameter, f.get_tensor(name), name, path)
            if EVAL_STATE in names and config.state_init == "normal":
                _copy(model.eval_state, f.get_tensor(EVAL_STATE), EVAL_STATE, path)
    return model


def _copy(target: torch.Tensor, value: torch.Tensor, name: str, path: Path) -> None:
    if tuple(value.shape) != tuple(target.shape):
        raise UserError(
            f"{shown(path)}: {name} is {list(value.shape)}, the model its config.json "
            f"describes has {list(target.shape)}; export the run again"
        )
    target.copy_(value.to(target.dtype))
