"""Crash-proof checkpoints: `RUN/checkpoints/step-NNNNNNN/`.

A checkpoint (full weights in safetensors, the optimizer state and data position in a
weights-only torch file, meta.json with a SHA-256 of each) is written under a temporary name,
flushed and renamed, and one saved again at the same step is renamed aside first, so a crash at
any moment leaves a loadable checkpoint and a flipped byte is caught by its checksum
(docs/design.md §7). Only rank 0 writes them; what they hold does not depend on the number of
processes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from fixedfirst.errors import UserError
from fixedfirst.files.writing import os_error_behind, readable_like_the_rest, remedy
from fixedfirst.model.lowrank import base_identity, frozen_names

FORMAT_VERSION = 1
MODEL_FILE, TRAINER_FILE, META_FILE = "model.safetensors", "trainer.pt", "meta.json"
BASE_KEY = "base_weights"
"""meta.json's key for the SHA-256 of the frozen base weights of a low-rank run's checkpoint."""
SWITCH_TAG = "switch"
"""The tag of the checkpoint a fixed-first run writes at its switch (the trainer's), which the
update diagnostic starts from and the looped mixture-of-experts study reads the router at."""
TMP, REPLACED = ".tmp-", ".replaced-"
"""Prefixes of a checkpoint directory being written, and of one being replaced by a new
checkpoint of the same step."""


def warn(line: str) -> None:
    """A warning: on stderr, where no --quiet and no redirected table hides it."""
    print(line, file=sys.stderr, flush=True)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path: Path, write: Callable[[Path], object]) -> str:
    write(path)
    with open(path, "rb") as f:
        os.fsync(f.fileno())
    return sha256(path)


def save_weights(weights: dict[str, torch.Tensor], path: Path) -> None:
    """model.safetensors, readable like every other file (safetensors creates it 0600). A
    failed write (a full disk) is the OSError behind safetensors' own error."""
    tensors = {k: v.contiguous() for k, v in weights.items()}
    try:
        save_file(tensors, str(path), metadata={"format": "pt"})
    except SafetensorError as e:
        raise (os_error_behind(e, path) or e) from None
    readable_like_the_rest(path)


def save_trainer_state(state: dict[str, Any], path: Path) -> None:
    """trainer.pt. Written through a Python file, so that a failed write (a full disk) is the
    OSError behind torch's RuntimeError."""
    try:
        with open(path, "wb") as f:
            torch.save(state, f)
    except RuntimeError as e:
        raise (os_error_behind(e, path) or e) from None


@dataclass
class Checkpoint:
    """A complete checkpoint directory and its metadata."""

    path: Path
    meta: dict[str, Any] = field(repr=False)

    @property
    def step(self) -> int:
        return int(self.meta["step"])

    @property
    def tags(self) -> list[str]:
        return list(self.meta.get("tags", []))

    def verify(self) -> None:
        """Raise UserError naming the first missing or corrupt file."""
        for name, digest in self.meta["files"].items():
            file = self.path / name
            if not file.is_file():
                raise UserError(f"checkpoint {self.path}: {name} is missing")
            if sha256(file) != digest:
                raise UserError(f"checkpoint {self.path}: {name} is corrupt (checksum mismatch)")

    def load_model(self, model: nn.Module) -> None:
        """Load the weights into `model` (a plain, unsharded one); a model of another shape is a
        UserError naming the first mismatched tensors. A low-rank run's checkpoint holds the
        trained weights only: `model`'s frozen ones must be those it names (`check_base`)."""
        self.check_base(base_identity(model))
        weights = self.load_weights(state_shapes(model))
        for alias, canonical in tied_aliases(model).items():
            weights[alias] = weights[canonical]
        try:
            model.load_state_dict(weights, strict=not frozen_names(model))
        except RuntimeError as e:
            first = str(e).strip().splitlines()[0]
            raise UserError(
                f"checkpoint {self.path}: weights do not fit this model ({first})"
            ) from None

    def check_base(self, identity: str | None) -> None:
        """Refuse frozen base weights (their `base_identity`) other than those this checkpoint's
        adapters were trained on: a resume or an evaluation would compute something else."""
        saved = self.meta.get(BASE_KEY)
        if saved == identity:
            return
        if saved is None or identity is None:
            which = "trained every weight" if saved is None else "trained low-rank adapters"
            raise UserError(
                f"checkpoint {self.path}: {which}, and this run's configuration does not "
                "([train.lowrank]); open it with the configuration it was written with"
            )
        raise UserError(
            f"checkpoint {self.path}: its adapters were trained on other base weights (SHA-256 "
            f"{saved[:12]}... in the checkpoint, {identity[:12]}... now): give the run's [model] "
            "the base it trained on (the same train.seed, or the same checkpoint to load)"
        )

    def load_weights(self, shapes: dict[str, tuple[int, ...]]) -> dict[str, torch.Tensor]:
        """The weights as a dict, checked against the model's parameter names and `shapes`."""
        try:
            weights = load_file(self.path / MODEL_FILE)
        except (SafetensorError, OSError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError(f"checkpoint {self.path}: cannot read {MODEL_FILE} ({first})") from None
        problems = [f"{k} missing" for k in sorted(shapes.keys() - weights.keys())]
        problems += [f"unexpected {k}" for k in sorted(weights.keys() - shapes.keys())]
        problems += [
            f"{k} is {list(weights[k].shape)} in the checkpoint, {list(shapes[k])} in the model"
            for k in sorted(weights.keys() & shapes.keys())
            if tuple(weights[k].shape) != tuple(shapes[k])
        ]
        if problems:
            raise UserError(
                f"checkpoint {self.path}: weights do not fit this model ({'; '.join(problems[:3])})"
            )
        return weights

    def load_trainer_state(self) -> dict[str, Any]:
        try:
            return torch.load(self.path / TRAINER_FILE, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError:
            raise UserError(
                f"checkpoint {self.path}: cannot load {TRAINER_FILE}: it holds objects other than "
                "tensors and plain data, refused because unpickling them could run code"
            ) from None
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError(
                f"checkpoint {self.path}: cannot load {TRAINER_FILE} ({first})"
            ) from None


def state_shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    """Name -> (full) shape of every tensor a checkpoint holds of `model`: its trained parameters
    (all of them, but in a low-rank run, whose frozen base the checkpoint names by its SHA-256)
    and persistent buffers (a transformers model's router biases; ours has none), each tied
    tensor once, under its canonical name."""
    left_out = tied_aliases(model).keys() | frozen_names(model)
    return {name: tuple(t.shape) for name, t in model.state_dict().items() if name not in left_out}


def tied_aliases(model: nn.Module) -> dict[str, str]:
    """Parameter names that are another name of an earlier parameter (tied embeddings):
    {alias: canonical}. Checkpoints store each tensor once, under its canonical name."""
    first: dict[int, str] = {}
    aliases = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in first:
            aliases[name] = first[id(p)]
        else:
            first[id(p)] = name
    return aliases


def _replacement(replaced: Path) -> Path:
    """Where the checkpoint that replaces `.replaced-step-N` goes: `step-N`."""
    return replaced.with_name(replaced.name.removeprefix(REPLACED))


def read_checkpoint(path: Path) -> Checkpoint | None:
    """The checkpoint at `path`, or None when it is not a complete one (no/unreadable meta)."""
    try:
        meta = json.loads((path / META_FILE).read_text())
        int(meta["step"])
        dict(meta["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return Checkpoint(path, meta)


class CheckpointManager:
    def __init__(self, directory: Path, keep: int = 3) -> None:
        self.directory = directory
        self.keep = keep

    def all(self) -> list[Checkpoint]:
        """Complete checkpoints, oldest first (not verified: see `latest_valid`). A checkpoint
        being replaced by one of the same step counts while the new one is not in place."""
        if not self.directory.is_dir():
            return []
        found = []
        paths = list(self.directory.glob("step-*"))
        replaced = self.directory.glob(f"{REPLACED}step-*")
        paths += [p for p in replaced if not _replacement(p).exists()]
        for p in paths:
            ckpt = read_checkpoint(p) if p.is_dir() else None
            if ckpt is not None:
                found.append(ckpt)
        return sorted(found, key=lambda c: c.step)

    def at_step(self, step: int) -> Checkpoint:
        for ckpt in self.all():
            if ckpt.step == step:
                return ckpt
        steps = ", ".join(str(c.step) for c in self.all()) or "none"
        raise UserError(f"no checkpoint at step {step} in {self.directory} (available: {steps})")

    def with_tag(self, tag: str) -> Checkpoint | None:
        for ckpt in reversed(self.all()):
            if tag in ckpt.tags:
                return ckpt
        return None

    def incomplete(self) -> list[Path]:
        """Checkpoint directories without a valid meta.json (not temporary ones being written):
        a copy or a crash outside our atomic rename left them; they are never loaded."""
        if not self.directory.is_dir():
            return []
        return sorted(
            p for p in self.directory.glob("step-*") if p.is_dir() and read_checkpoint(p) is None
        )

    def set_aside_incomplete(self, warn: Callable[[str], None] = warn) -> None:
        """Move incomplete checkpoint directories to `incomplete-step-N[-i]` (never deleted:
        they may hold what someone wants back), so that the step can be saved again."""
        for path in self.incomplete():
            target = path.with_name(f"incomplete-{path.name}")
            i = 1
            while target.exists():
                target = path.with_name(f"incomplete-{path.name}-{i}")
                i += 1
            try:
                os.replace(path, target)
            except OSError as e:
                raise UserError(
                    f"checkpoint {path} is incomplete (no valid {META_FILE}) and cannot be moved "
                    f"aside ({e.strerror or e}); move it out of {self.directory} by hand"
                ) from None
            warn(
                f"warning: checkpoint {path} is incomplete (no valid {META_FILE}); moved it to "
                f"{target.name}"
            )

    def latest_valid(self, warn: Callable[[str], None] = warn) -> Checkpoint | None:
        """The newest checkpoint whose files pass their checksums; older ones are fallbacks,
        each skipped one named in a warning. None when every one is corrupt (the caller's error
        then says so in one line)."""
        skipped = []
        for ckpt in reversed(self.all()):
            try:
                ckpt.verify()
            except UserError as e:
                skipped.append(f"warning: {e}; falling back to the previous checkpoint")
                continue
            for line in skipped:
                warn(line)
            return ckpt
        return None

    def resume_point(self, warn: Callable[[str], None] = warn) -> Checkpoint | None:
        """The checkpoint a resumed run continues from: what an interrupted save left undone,
        incomplete checkpoints moved aside, then the newest valid one (None: none was saved;
        refused in one line when every one is corrupt)."""
        self.recover_interrupted_writes()
        self.set_aside_incomplete(warn=warn)
        ckpt = self.latest_valid(warn=warn)
        if ckpt is None and self.all():
            raise UserError(
                f"no loadable checkpoint in {self.directory}: every one is corrupt; start a new "
                "run with another --out"
            )
        return ckpt

    def recover_interrupted_writes(self) -> None:
        """Undo what an interrupted save left: delete half-written checkpoints, and put back a
        checkpoint whose replacement by one of the same step did not complete (or delete it,
        when the replacement is in place)."""
        if not self.directory.is_dir():
            return
        for p in self.directory.glob(f"{TMP}step-*"):
            shutil.rmtree(p, ignore_errors=True)
        for p in self.directory.glob(f"{REPLACED}step-*"):
            if _replacement(p).exists():
                shutil.rmtree(p, ignore_errors=True)
            else:
                os.replace(p, _replacement(p))

    def save(
        self,
        step: int,
        weights: dict[str, torch.Tensor],
        trainer_state: dict[str, Any],
        meta: dict[str, Any],
        tags: list[str],
    ) -> Checkpoint:
        """Write a checkpoint of full `weights` (name -> tensor, each tied tensor once)."""

        def write(tmp: Path) -> dict[str, str]:
            return {
                MODEL_FILE: _write_file(tmp / MODEL_FILE, lambda p: save_weights(weights, p)),
                TRAINER_FILE: _write_file(
                    tmp / TRAINER_FILE, lambda p: save_trainer_state(trainer_state, p)
                ),
            }

        return self._install(step, write, meta, tags)

    def copy_in(self, source: Checkpoint, meta: dict[str, Any], tags: list[str]) -> Checkpoint:
        """A copy of another run's checkpoint (its files, `meta` for its metadata): a branch."""

        def write(tmp: Path) -> dict[str, str]:
            files = {}
            for name in (MODEL_FILE, TRAINER_FILE):
                files[name] = _write_file(
                    tmp / name, lambda p: shutil.copyfile(source.path / p.name, p)
                )
            return files

        return self._install(source.step, write, meta, tags)

    def _install(
        self,
        step: int,
        write: Callable[[Path], dict[str, str]],
        meta: dict[str, Any],
        tags: list[str],
    ) -> Checkpoint:
        """`write(tmp)` the files (returning their digests) into a temporary directory, add
        meta.json, then rename it into place (see the module docstring)."""
        name = f"step-{step:07d}"
        final = self.directory / name
        existing = read_checkpoint(final) if final.is_dir() else None
        if existing is not None:  # same step saved again (e.g. switch and end): merge the tags
            tags = sorted(set(existing.tags) | set(tags))
        tmp, replaced = self.directory / f"{TMP}{name}", self.directory / f"{REPLACED}{name}"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            full_meta = {
                "format": FORMAT_VERSION,
                **meta,
                "step": step,
                "tags": sorted(set(tags)),
                "files": write(tmp),
            }
            _write_file(tmp / META_FILE, lambda p: p.write_text(json.dumps(full_meta, indent=2)))
            _fsync_dir(tmp)
            if existing is not None:
                # Renamed aside, not deleted: until the new one is in place the old one is
                # what `all` finds at this step (and what a resume puts back after a crash).
                shutil.rmtree(replaced, ignore_errors=True)
                os.replace(final, replaced)
            elif final.exists():  # incomplete: never loaded, but it would block the rename
                self.set_aside_incomplete()
            os.replace(tmp, final)
            _fsync_dir(self.directory)
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            if replaced.is_dir() and not final.exists():
                with contextlib.suppress(OSError):  # else `all` still finds it where it is
                    os.replace(replaced, final)
            raise self._write_failed(final, step, e) from None
        shutil.rmtree(replaced, ignore_errors=True)
        self._prune()
        return Checkpoint(final, full_meta)

    def _write_failed(self, final: Path, step: int, error: OSError) -> UserError:
        """The one line for a checkpoint that could not be written: why, what is left, what
        to do."""
        earlier = [c for c in self.all() if c.step <= step]
        kept = (
            f"the previous checkpoint ({earlier[-1].path.name}) is intact"
            if earlier
            else "no checkpoint of this run was saved yet"
        )
        return UserError(
            f"cannot write checkpoint {final} ({error.strerror or error}); {kept}; "
            f"{remedy(error)}, then resume with --resume"
        )

    def _prune(self) -> None:
        periodic = [c for c in self.all() if set(c.tags) <= {"periodic", "paused"}]
        for ckpt in periodic[: max(0, len(periodic) - self.keep)]:
            shutil.rmtree(ckpt.path, ignore_errors=True)
