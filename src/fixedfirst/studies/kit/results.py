"""What every study records of a run and prints of its scores.

A study's results.json has a row per run with its own keys (arm, seed, scores) and the same four
of what the run cost (`cost`); and while its runs train side by side, each finished scoring says
one line (`print_scores`; a run's chains scoring, `scoring`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from fixedfirst.studies.kit.workers import Job, once_finished


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


def scored_bands(result: Mapping[str, Any]) -> Any:
    """The bands of a scoring job's result that keeps its scores under "scores"."""
    return result["scores"]["bands"]


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


def scoring(
    name: str,
    run: Path,
    call: Callable[..., Any],
    *args: Any,
    bands: Callable[[Any], Mapping[str, Mapping[str, Any]]],
    depths: Iterable[int] | None = None,
    label: str | None = None,
) -> Job:
    """The job scoring run `name` on the chains task, `call(run, *args)`, ready once the run has
    finished; as it finishes it says the hard band of its result's `bands` at `depths`."""

    def say(result: Any, seconds: float) -> None:
        print_scores(name, *hard_band(bands(result)), seconds, depths)

    return once_finished(label or f"score {name}", run, call, *args, say=say)
