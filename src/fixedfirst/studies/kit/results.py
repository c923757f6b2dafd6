"""What every study records of a run and prints of its scores.

A study's results.json has a row per run with its own keys (arm, seed, scores) and the same four
of what the run cost (`cost`); and while its runs train side by side, each finished scoring says
one line (`print_scores`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def cost(summary: Mapping[str, Any]) -> dict[str, Any]:
    """What a finished run cost, from its summary.json: optimizer steps, tokens, modeled FLOPs
    and the training wall-clock in seconds."""
    return {
        "steps": summary["steps"],
        "tokens": summary["tokens"],
        "flops": summary["flops"],
        "wall_s": summary["wall"],
    }


def hard_band(bands: Mapping[str, Mapping[str, Any]]) -> tuple[str, Mapping[str, float]]:
    """The harder half of the training range of a run's chains scores: ("difficulty LOW..HIGH ",
    its accuracy by depth)."""
    hard = [b for b in bands.values() if b["in_range"]][-1]
    return f"difficulty {hard['low']}..{hard['high']} ", hard["by_depth"]


def print_scores(
    name: str,
    label: str,
    by_depth: Mapping[str, float],
    seconds: float,
    depths: Iterable[int] | None = None,
    percent: bool = True,
) -> None:
    """The line of a finished run's scoring: what is scored (`label`), at each of `depths` that
    was measured (None: every depth), as a percentage or as the number it is."""
    shown = set(map(str, depths)) if depths is not None else set(by_depth)
    cells = ", ".join(
        f"K={d} {100 * v:.0f}%" if percent else f"K={d} {v:.3g}"
        for d, v in by_depth.items()
        if d in shown
    )
    print(f"  scored {name}: {label}{cells} ({seconds:.0f} s)", flush=True)
