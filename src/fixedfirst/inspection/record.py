"""The numbers of an inspection as one JSON record: what the page embeds, draws and shows on
hover, and what its PNG is drawn from, so the two pictures and any reader of the page agree.

The record's format is in docs/reference/files.md.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fixedfirst.data.registry import ScoredSequence
from fixedfirst.data.tokenizer import EOD_TOKEN, Tokenizer
from fixedfirst.errors import UserError
from fixedfirst.inspection.measure import Inspection
from fixedfirst.model.loss import IGNORE_INDEX

PAGE_FORMAT = "fixedfirst-inspect"
PAGE_VERSION = 1
COLORMAP = "viridis"
"""Probability of the target: dark at 0, yellow at 1 (NLL: the same colours, dark at log V)."""

MAX_POSITIONS = 10_000
"""The most positions a page holds: its record grows with positions x depths (about 0.3 MB per
1,000 positions at 18 depths)."""
MAX_DEPTHS = 64
"""The most serving depths a page shows (one heat-map row each)."""

_SHOWN = {"\n": "↵", "\t": "⇥", "\r": "␍", EOD_TOKEN: "⟨eod⟩"}


def check_page_size(sequences: list[ScoredSequence]) -> None:
    positions = sum(len(s.inputs) for s in sequences)
    if positions > MAX_POSITIONS:
        raise UserError(
            f"{positions:,} positions to inspect; a page holds at most {MAX_POSITIONS:,} "
            "(give a shorter text or fewer sequences)"
        )


def check_depth_count(depths: list[int]) -> None:
    if len(depths) > MAX_DEPTHS:
        raise UserError(
            f"--depths: {len(depths)} depths; a page shows at most {MAX_DEPTHS} (one row each), "
            "e.g. 1..16,32,64,128"
        )


def token_text(tokenizer: Tokenizer | None, token: int) -> str:
    """How a token is shown: its text, with line breaks, tabs and the end-of-document token as
    visible marks and a byte that is no character alone (part of a UTF-8 sequence) as \\xNN."""
    if tokenizer is None:
        return f"#{token}"
    text = tokenizer.decode([token])
    if text in _SHOWN:
        return _SHOWN[text]
    if "\ufffd" in text and tokenizer.kind == "byte" and token < 256:
        return f"\\x{token:02x}"
    for raw, shown in _SHOWN.items():
        text = text.replace(raw, shown)
    return "".join(c if c.isprintable() or c == " " else f"\\x{ord(c):02x}" for c in text)


def reads_as_text(sequence: ScoredSequence) -> bool:
    """Whether every scored target is the next input (language modelling), so the page can show
    the predicted token under each column; else (a task's labels) it shows input and label."""
    inputs, targets = sequence.inputs, sequence.targets
    return all(
        t == IGNORE_INDEX or (i + 1 < len(inputs) and inputs[i + 1] == t) or i + 1 == len(inputs)
        for i, t in enumerate(targets)
    )


def _rounded(values: np.ndarray, digits: int) -> list[float | None]:
    return [None if math.isnan(v) else round(float(v), digits) for v in values]


def _colormap(stops: int = 32) -> list[str]:
    import matplotlib

    cmap = matplotlib.colormaps[COLORMAP]
    return [matplotlib.colors.to_hex(cmap(i / (stops - 1))) for i in range(stops)]


def summary(inspection: Inspection, answers: np.ndarray) -> dict[str, Any]:
    """Means over the scored positions (NLL, rule depths) and accuracy over the answers."""
    scored, targets = inspection.scored, inspection.targets

    def accuracy(top: np.ndarray) -> float | None:
        return float((top[answers] == targets[answers]).mean()) if answers.any() else None

    return {
        "scored": int(scored.sum()),
        "answers": int(answers.sum()),
        "nll_by_depth": {str(d): v for d, v in inspection.mean_nll().items()},
        "accuracy_by_depth": {
            str(d): accuracy(inspection.top[i]) for i, d in enumerate(inspection.depths)
        },
        "rules": [
            {
                "name": r.rule.name,
                "mean_depth": float(r.depth[scored].mean()),
                "nll": float(r.nll[scored].mean()),
                "accuracy": accuracy(r.top),
            }
            for r in inspection.rules
        ],
    }


def page_record(
    inspection: Inspection, tokenizer: Tokenizer | None, vocab_size: int, about: dict[str, str]
) -> dict[str, Any]:
    sequences, starts = [], []
    answers: dict[str, str] = {}
    offset = 0
    for s in inspection.sequences:
        starts.append(offset)
        sequences.append(
            {
                "title": s.title,
                "start": offset,
                "length": len(s.inputs),
                "reads_as_text": reads_as_text(s),
            }
        )
        answers.update({str(offset + p): note for p, note in sorted(s.answers.items())})
        offset += len(s.inputs)
    inputs = [t for s in inspection.sequences for t in s.inputs]
    targets = inspection.targets
    answer_mask = np.zeros(len(targets), dtype=bool)
    answer_mask[[int(p) for p in answers]] = True
    answer_mask &= inspection.scored
    shown = {*inputs, *targets[inspection.scored].tolist(), *inspection.top.ravel().tolist()}
    for r in inspection.rules:
        shown.update(r.top.tolist())
    return {
        "format": PAGE_FORMAT,
        "version": PAGE_VERSION,
        "about": about,
        "depths": inspection.depths,
        "window": max(w.end - w.start for w in inspection.windows),
        "vocab_size": vocab_size,
        "sequences": sequences,
        "windows": [
            [starts[w.sequence] + w.start, starts[w.sequence] + w.end] for w in inspection.windows
        ],
        "inputs": inputs,
        "targets": [None if t == IGNORE_INDEX else int(t) for t in targets],
        "answers": answers,
        "tokens": {str(t): token_text(tokenizer, int(t)) for t in sorted(shown)},
        "nll": [_rounded(row, 5) for row in inspection.nll],
        "top": inspection.top.tolist(),
        "top_p": [_rounded(row, 3) for row in inspection.top_probability],
        "stable_from": inspection.stable_from().tolist(),
        "rules": [
            {
                "name": r.rule.name,
                "label": r.rule.describe(),
                "threshold": r.rule.threshold,
                "max_depth": r.rule.max_depth,
                "depth": r.depth.tolist(),
                "nll": _rounded(r.nll, 5),
                "top": r.top.tolist(),
            }
            for r in inspection.rules
        ],
        "summary": summary(inspection, answer_mask),
        "colormap": _colormap(),
    }
