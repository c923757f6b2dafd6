"""Export a run for inference: its weights, model configuration and tokenizer in one directory.

The layout and the reader are in `runs/exported.py`. The directory is written under a temporary name
and renamed when complete, and a non-empty DIR is refused, so an export never overwrites anything.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fixedfirst.errors import UserError
from fixedfirst.files.writing import write_error
from fixedfirst.runs.exported import (
    CONFIG_FILE,
    EXPORT_FORMAT,
    EXPORT_VERSION,
    TOKENIZER_DIR,
    WEIGHTS_FILE,
    is_export,
)
from fixedfirst.runs.served import deepest_training_depth, load_served
from fixedfirst.runs.tokenizer import tokenizer_summary


def check_out_dir(out: Path) -> None:
    """Refuse an --out that holds anything; its missing parents are made (like train)."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        raise UserError(f"--out {out}: directory exists and is not empty; nothing was written")
    existing = next(p for p in (out.parent, *out.parent.parents) if p.exists())
    if not existing.is_dir():
        raise UserError(f"--out {out}: {existing} is not a directory")


def export_run(run: str | Path, out: str | Path, step: int | None = None) -> dict[str, Any]:
    """Write the run's checkpoint at `step` (default: the newest) into `out`; return config.json."""
    from fixedfirst import __version__
    from fixedfirst.runs.checkpoint import MODEL_FILE, save_weights, tied_aliases
    from fixedfirst.schedules import describe

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
        else {**tokenizer_summary(tokenizer), "directory": TOKENIZER_DIR},
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

    def fill(directory: Path) -> None:
        save_weights(weights, directory / WEIGHTS_FILE)
        if tokenizer is not None:
            tokenizer.save(directory / TOKENIZER_DIR)
        (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")

    write_directory(out, fill)
    return config


def write_directory(out: Path, fill: Callable[[Path], None]) -> None:
    """Run `fill(tmp)` on a temporary directory beside `out`, then rename it to `out` (an empty
    directory, or none: `check_out_dir`). A failed write (a full disk) is one line, and leaves
    neither the temporary directory nor the parents made for it."""
    tmp = out.with_name(f".tmp-{out.name}")
    made = [p for p in (out.parent, *out.parent.parents) if not p.exists()]
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        fill(tmp)
        if out.is_dir():
            out.rmdir()  # empty (checked by check_out_dir)
        os.replace(tmp, out)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        for parent in made:  # parents made for this export, innermost first
            with contextlib.suppress(OSError):
                parent.rmdir()
        raise write_error(out, e) from None
