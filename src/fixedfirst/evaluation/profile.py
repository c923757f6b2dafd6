"""A model's profile by depth: held-out NLL at each serving depth with a 95% interval over
held-out blocks, and beside a finished run's the profile of the checkpoint it started from
("before and after").

A block is one held-out row: `seq_len` consecutive tokens of the validation split, rows not
overlapping, the independent unit of the held-out sample. Each depth's NLL is per scored token
over every block and its interval the ratio estimator's t-interval over blocks
(`stats.intervals.ratio_interval`); the change from the checkpoint to the run is paired block by
block, both being scored on the same blocks. An evaluation file (evaluation/cached.py) keeps the
per-block NLLs, so that profiles scored apart (a finishing run and its control) can be paired
later, and `merged` joins an evaluation of new depths to the saved one of the same question
instead of replacing it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from fixedfirst.config import ModelSection, RunConfig
from fixedfirst.data.source import Batch
from fixedfirst.errors import UserError
from fixedfirst.evaluation.nll import HeldOutScores, mean_serving_nll, score_held_out
from fixedfirst.model.kinds import initial_model
from fixedfirst.runs.identity import with_checkpoint_identity
from fixedfirst.stats.intervals import ratio_interval

LEVEL = 0.95
BY_DEPTH = ("nll_by_depth", "row_nll", "interval_by_depth")
"""The entries of a profile keyed by depth (a base's has `difference_by_depth` too)."""


def interval(row_nll: list[float], row_tokens: list[int]) -> dict[str, float | int] | None:
    """The 95% interval over blocks of the NLL per token whose blocks' means are `row_nll`
    (None with fewer than two blocks)."""
    sums = [nll * n for nll, n in zip(row_nll, row_tokens, strict=True)]
    if sum(1 for n in row_tokens if n > 0) < 2:
        return None
    found = ratio_interval(sums, row_tokens, LEVEL)
    return {"low": found.low, "high": found.high, "sd": found.sd, "blocks": found.n}


def difference(
    after: list[float], before: list[float], row_tokens: list[int]
) -> dict[str, float | int] | None:
    """after - before, NLL per token, with its 95% interval paired over the same blocks."""
    sums = [(a - b) * n for a, b, n in zip(after, before, row_tokens, strict=True)]
    if sum(1 for n in row_tokens if n > 0) < 2:
        return None
    found = ratio_interval(sums, row_tokens, LEVEL)
    return {"mean": found.mean, "low": found.low, "high": found.high, "blocks": found.n}


def profile(scores: HeldOutScores, depths: list[int]) -> dict[str, Any]:
    """The JSON of a model scored by blocks: NLL, interval and each block's NLL, by depth."""
    return {
        "nll_by_depth": {str(d): scores.nll[d] for d in depths},
        "interval_by_depth": {
            str(d): interval(scores.row_nll[d], scores.row_tokens) for d in depths
        },
        "row_nll": {str(d): [round(v, 6) for v in scores.row_nll[d]] for d in depths},
    }


def checkpoint_record(model: ModelSection) -> dict[str, Any] | None:
    """Which checkpoint a model starts from: its directory, weights' checksum and the depth it
    was trained at (None for a model trained from scratch)."""
    if model.checkpoint is None:
        return None
    return {
        "path": model.checkpoint,
        "weights_sha256": model.checkpoint_sha256,
        "depth": model.checkpoint_depth,
    }


def base_profile(
    config: RunConfig,
    batches: list[Batch],
    depths: list[int],
    device: torch.device,
    dtype: torch.dtype,
    after: HeldOutScores,
) -> dict[str, Any] | None:
    """The profile of the checkpoint the run started from, on the run's own blocks, with the
    run's change from it (`difference_by_depth`, run - checkpoint); None, said on stderr, when
    the checkpoint is not where the run recorded it or holds other weights now."""
    try:
        config = with_checkpoint_identity(config)
    except UserError as e:
        print(f"note: the checkpoint the run started from is not scored: {e}", file=sys.stderr)
        return None
    model = initial_model(config.model).to(device)
    before = score_held_out(model, batches, depths, device, dtype, rows=True)
    del model
    changes = {
        str(d): difference(after.row_nll[d], before.row_nll[d], after.row_tokens) for d in depths
    }
    return {**profile(before, depths), "difference_by_depth": changes}


def merged(saved: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any] | None:
    """`new` joined with the `saved` evaluation of the same question (the same weights, blocks
    and precision, and the same checkpoint beside them), the new depths replacing the same
    depths of the saved one and the saved one's others kept; None when `saved` answers another
    question (or is none)."""
    if saved is None:
        return None
    same = ("format", "version", "weights_sha256", "validation_sha256", "precision")
    if any(saved.get(key) != new.get(key) for key in same):
        return None
    before, after = saved.get("base"), new.get("base")
    if (before is None) != (after is None) or (
        before is not None and saved.get("checkpoint") != new.get("checkpoint")
    ):
        return None
    out = {**saved, **new}
    for key in BY_DEPTH:
        out[key] = {**saved.get(key, {}), **new[key]}
    depths = sorted({*map(int, saved.get("depths", [])), *map(int, new["depths"])})
    out["depths"] = depths
    out["mean_serving_nll"] = mean_serving_nll({int(d): v for d, v in out["nll_by_depth"].items()})
    if before is not None and after is not None:
        out["base"] = {
            key: {**before.get(key, {}), **after[key]} for key in (*BY_DEPTH, "difference_by_depth")
        }
    return out


def nll_cell(nll: float, bounds: dict[str, Any] | None) -> str:
    """'3.1234 [3.10, 3.15]': an NLL and its interval (the NLL alone without one)."""
    if bounds is None:
        return f"{nll:.4f}"
    return f"{nll:.4f} [{bounds['low']:.4f}, {bounds['high']:.4f}]"


def change_cell(change: dict[str, Any] | None) -> str:
    if change is None:
        return "n/a"
    return f"{change['mean']:+.4f} [{change['low']:+.4f}, {change['high']:+.4f}]"


def table(result: dict[str, Any]) -> list[str]:
    """The evaluation as Markdown: a row per depth; with a base, its NLL and the change."""
    base = result.get("base")
    native = (result.get("checkpoint") or {}).get("depth")
    head = "| depth | NLL [95%] |"
    rule = "| --- | --- |"
    if base is not None:
        head += " checkpoint NLL [95%] | change [95%] |"
        rule += " --- | --- |"
    lines = [head, rule]
    for d in result["depths"]:
        key = str(d)
        mark = " (trained)" if d == native else ""
        after = nll_cell(result["nll_by_depth"][key], result["interval_by_depth"][key])
        row = f"| {d}{mark} | {after} |"
        if base is not None:
            before = nll_cell(base["nll_by_depth"][key], base["interval_by_depth"][key])
            row += f" {before} | {change_cell(base['difference_by_depth'][key])} |"
        lines.append(row)
    return lines


def figure_path(json_path: Path) -> Path:
    """Where the figure of an evaluation saved at `json_path` goes: beside it, as PNG."""
    return json_path.with_suffix(".png")


def draw(series: list[tuple[str, dict[str, Any]]], native: int | None, title: str, path: Path):
    """NLL against serving depth, one line per (label, profile) with its 95% band; the depth
    the checkpoint was trained at marked. Drawn on a bare Figure (no pyplot)."""
    from matplotlib.figure import Figure

    from fixedfirst.files.writing import save_figure

    fig = Figure(figsize=(6.0, 3.8), layout="constrained")
    ax = fig.subplots()
    for label, found in series:
        depths = sorted(int(d) for d in found["nll_by_depth"])
        nll = [found["nll_by_depth"][str(d)] for d in depths]
        (line,) = ax.plot(depths, nll, marker="o", ms=3, label=label)
        bounds = [found["interval_by_depth"].get(str(d)) for d in depths]
        if all(b is not None for b in bounds):
            low = [b["low"] for b in bounds]
            high = [b["high"] for b in bounds]
            ax.fill_between(depths, low, high, color=line.get_color(), alpha=0.15, lw=0)
    if native is not None:
        ax.axvline(native, color="0.5", ls=":", lw=1, label=f"trained at {native}")
    ax.set_xlabel("serving depth (loop passes)")
    ax.set_ylabel("held-out NLL (nats/token)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    return save_figure(fig, path)
