"""What the chains experiment's scores show, computed once for the report and the figures.

Per schedule (over its seeds: mean, min and max, and every seed's value):
- band accuracy at every serving depth;
- the depth gain: the harder in-range band at the deepest training depth (16) against depth 1,
  as a paired interval over evaluation sequences per seed ("does depth decide the answer?");
- extrapolation: each band beyond the training range at the deepest serving depth against depth
  16, paired per seed ("does serving deeper than trained solve harder instances?"); fixed
  depths are compared rather than the best of many, so no depth is chosen by the data it is
  judged on;
- solved difficulty: the largest difficulty up to which the seed-mean accuracy stays >= SOLVED,
  at depths up to 16 and at depths beyond;
- the KL exit rule: accuracy and mean depth per band.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fixedfirst.intervals import t_interval

SOLVED = 0.9
"""Accuracy at which a difficulty counts as solved."""
TRAINING_DEPTH = 16
"""The deepest depth the paper's schedules train at (uniform 1..16 and the finishes)."""


def _spread(values: list[float]) -> dict[str, Any]:
    return {"mean": float(np.mean(values)), "min": min(values), "max": max(values), "seeds": values}


def _paired(band: dict[str, Any], deep: int, shallow: int) -> dict[str, Any]:
    a = np.asarray(band["per_sequence"][str(deep)])
    b = np.asarray(band["per_sequence"][str(shallow)])
    return t_interval(a - b).to_dict()


def _solved_up_to(accuracy: dict[str, list[float]], depths: list[int], start: int) -> int | None:
    """The largest d >= start such that every difficulty start..d reaches SOLVED at one of
    `depths` (the best of them per difficulty); None if `start` itself does not."""
    best = np.max([accuracy[str(k)] for k in depths], axis=0)
    solved = None
    for d in range(start, len(best)):
        if best[d] < SOLVED:
            break
        solved = d
    return solved


def analyse(runs: dict[str, dict[str, Any]], depths: list[int]) -> dict[str, Any]:
    schedules = list(dict.fromkeys(r["schedule"] for r in runs.values()))
    by_schedule = {s: [r for r in runs.values() if r["schedule"] == s] for s in schedules}
    first = next(iter(runs.values()))["scores"]
    bands = [
        {"label": label, "low": b["low"], "high": b["high"], "in_range": b["in_range"]}
        for label, b in first["bands"].items()
    ]
    hard = [b for b in bands if b["in_range"]][-1]
    max_ops = hard["high"]
    deepest = max(depths)
    shallow_depths = [d for d in depths if d <= TRAINING_DEPTH]
    deep_depths = [d for d in depths if d > TRAINING_DEPTH]
    out: dict[str, Any] = {
        "schedules": schedules,
        "bands": bands,
        "hard_band": hard["label"],
        "training_depth": TRAINING_DEPTH,
        "deepest_depth": deepest,
        "solved_threshold": SOLVED,
        "band_accuracy": {},
        "depth_gain": {},
        "extrapolation": {},
        "solved": {},
        "accuracy_by_difficulty": {},
        "kl_exit": {},
    }
    for s, seeds in by_schedule.items():
        out["band_accuracy"][s] = {
            b["label"]: {
                str(d): _spread(
                    [r["scores"]["bands"][b["label"]]["by_depth"][str(d)]["mean"] for r in seeds]
                )
                for d in depths
            }
            for b in bands
        }
        if TRAINING_DEPTH in depths and 1 in depths:
            out["depth_gain"][s] = {
                "band": hard["label"],
                "seeds": {
                    str(r["seed"]): _paired(r["scores"]["bands"][hard["label"]], TRAINING_DEPTH, 1)
                    for r in seeds
                },
            }
        if TRAINING_DEPTH in depths and deepest > TRAINING_DEPTH:
            out["extrapolation"][s] = {
                b["label"]: {
                    str(r["seed"]): _paired(
                        r["scores"]["bands"][b["label"]], deepest, TRAINING_DEPTH
                    )
                    for r in seeds
                }
                for b in bands
                if not b["in_range"]
            }
        mean_accuracy = {
            str(d): np.mean([r["scores"]["accuracy"][str(d)] for r in seeds], axis=0).tolist()
            for d in depths
        }
        out["accuracy_by_difficulty"][s] = mean_accuracy
        out["solved"][s] = {
            "up_to_training_depth": _solved_up_to(mean_accuracy, shallow_depths, max_ops + 1),
            "beyond_training_depth": (
                _solved_up_to(mean_accuracy, deep_depths, max_ops + 1) if deep_depths else None
            ),
        }
        exits = [r["scores"]["kl_exit"] for r in seeds]
        out["kl_exit"][s] = {
            "threshold": exits[0]["threshold"],
            "max_depth": exits[0]["max_depth"],
            "accuracy": np.mean([e["accuracy"] for e in exits], axis=0).tolist(),
            "mean_depth": np.mean([e["mean_depth"] for e in exits], axis=0).tolist(),
            "bands": {
                b["label"]: {
                    "accuracy": _spread(
                        [float(np.mean(e["accuracy"][b["low"] : b["high"] + 1])) for e in exits]
                    ),
                    "mean_depth": _spread(
                        [float(np.mean(e["mean_depth"][b["low"] : b["high"] + 1])) for e in exits]
                    ),
                }
                for b in bands
            },
        }
    return out
