"""What the chains experiment's scores support, by rules fixed before the numbers were seen.

The unit is the seed: a score is a 95% t-interval over seeds of a seed's accuracy (cut at 0 and
1, which an accuracy cannot leave), a comparison
the same-seed difference with its interval, "cannot tell" when it contains zero. The rules
(bands, depth decides the answer, extrapolation, matched FLOPs, extrapolates best, solved up to
d, collapse, the KL exit rule) are docs/design.md §5, "chains: the rules"; their bars are the
constants below, but for the 40 points of depth deciding the answer, which is the default
preset's first primary comparison. The preset's primary comparisons (claims of the table
`kit.depth_arms.BAND_CLAIMS`) are each decided by their own interval; every other same-seed
difference computed here is exploratory, its verdict corrected over all of them by Holm's method
(`kit/claims.py`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fixedfirst.stats.evidence import over_seeds
from fixedfirst.studies.kit.claims import (
    ZERO_EVERYWHERE,
    Claim,
    correct_family,
    family_counts,
    primary_verdict,
    same_seed_difference,
)
from fixedfirst.studies.kit.depth_arms import ACCURACY, BAND_CLAIMS
from fixedfirst.tasks.chains.bands import band_roles
from fixedfirst.tasks.chains.sets import STANDARD

SOLVED = 0.9
"""Accuracy at which a difficulty counts as solved."""
TRAINING_DEPTH = 16
"""The deepest depth the paper's schedules train at (uniform 1..16 and the finishes)."""
REFERENCE = "uniform-1-16"
"""The schedule every other is compared with at matched FLOPs."""
COMPARISONS = (("hard", 1), ("hard", TRAINING_DEPTH), ("near", None), ("far", None))
"""(band, depth) cells of the matched-FLOP comparison; None is the deepest serving depth."""
COLLAPSE_FROM = 4
COLLAPSE_DEPTHS = (8, 12, 16, 24, 32, 48, 64)


Key = tuple[str, str, tuple[str, int], tuple[str, int]]
"""(set, band role, (schedule, depth), (schedule, depth)): one same-seed difference, either way
round."""


def difference_key(set_name: str, role: str, a: tuple[str, int], b: tuple[str, int]) -> Key:
    first, second = sorted((a, b))
    return (set_name, role, first, second)


def _accuracy(run: dict[str, Any], set_name: str, role: str, depth: int) -> float:
    scored = run["scores"]["sets"][set_name]
    band = band_roles(scored["bands"])[role]
    return scored["bands"][band]["by_depth"][str(depth)]


def solved_up_to(accuracy: list[float]) -> int:
    """The largest d with every difficulty 0..d at >= SOLVED; -1 when difficulty 0 is not."""
    solved = -1
    for d, a in enumerate(accuracy):
        if a < SOLVED:
            break
        solved = d
    return solved


def chosen_depth(run: dict[str, Any], depths: list[int]) -> int:
    """The depth with the best `near` accuracy on the run's selection set (the smallest on a
    tie): a depth chosen without the test labels."""
    selection = run["scores"]["selection"]
    near = selection["bands"][band_roles(selection["bands"])["near"]]["by_depth"]
    return max(depths, key=lambda d: (near[str(d)], -d))


def in_range_accuracy(run: dict[str, Any], depth: int, max_ops: int) -> float:
    return float(np.mean(run["scores"]["sets"]["standard"]["accuracy"][str(depth)][: max_ops + 1]))


def analysed_scores(scores: dict[str, Any]) -> dict[str, Any]:
    """The part of a run's scores (`scoring.py`) that `analyse` reads: every set's bands, the
    standard set's accuracy per difficulty, the selection set's `near` band, the KL exit rule's
    accuracy and depth per difficulty."""
    sets = {}
    for name, scored in scores["sets"].items():
        sets[name] = {"eval_ops": scored["eval_ops"], "bands": scored["bands"]}
        if name == STANDARD:
            sets[name]["accuracy"] = scored["accuracy"]
    selection = scores["selection"]["bands"]
    near = band_roles(selection)["near"]
    exits = scores["kl_exit"]
    return {
        "sets": sets,
        "selection": {
            "bands": {
                label: {"in_range": band["in_range"]}
                | ({"by_depth": band["by_depth"]} if label == near else {})
                for label, band in selection.items()
            }
        },
        "kl_exit": {
            key: exits[key] for key in ("threshold", "max_depth", "accuracy", "mean_depth")
        },
    }


def analyse(
    runs: dict[str, dict[str, Any]],
    depths: list[int],
    max_ops: int,
    primary: list[Claim],
) -> dict[str, Any]:
    """Every score, difference and rule of the report; `primary` are the preset's primary
    comparisons, and every other difference is corrected as one exploratory family."""
    schedules = list(dict.fromkeys(r["schedule"] for r in runs.values()))
    seeds = {s: {r["seed"]: r for r in runs.values() if r["schedule"] == s} for s in schedules}
    first = next(iter(runs.values()))["scores"]
    set_names = list(first["sets"])
    deepest = max(depths)
    cells = [(role, deepest if d is None else d) for role, d in COMPARISONS]
    family: dict[Key, list[dict[str, Any]]] = {}

    def values(schedule: str, set_name: str, role: str, depth: int) -> dict[int, float]:
        return {s: _accuracy(r, set_name, role, depth) for s, r in seeds[schedule].items()}

    def difference(
        set_name: str, role: str, a: tuple[str, int], b: tuple[str, int]
    ) -> dict[str, Any] | None:
        """a's accuracy minus b's, (schedule, depth) each, same seed; kept in the family."""
        d = same_seed_difference(
            values(a[0], set_name, role, a[1]), values(b[0], set_name, role, b[1])
        )
        if d is not None:
            family.setdefault(difference_key(set_name, role, a, b), []).append(d)
        return d

    out: dict[str, Any] = {
        "schedules": schedules,
        "seeds": sorted({r["seed"] for r in runs.values()}),
        "sets": {
            name: {
                "eval_ops": first["sets"][name]["eval_ops"],
                "bands": {
                    role: {
                        "label": label,
                        "low": first["sets"][name]["bands"][label]["low"],
                        "high": first["sets"][name]["bands"][label]["high"],
                    }
                    for role, label in band_roles(first["sets"][name]["bands"]).items()
                },
            }
            for name in set_names
        },
        "training_depth": TRAINING_DEPTH,
        "deepest_depth": deepest,
        "solved_threshold": SOLVED,
        "reference": REFERENCE if REFERENCE in schedules else None,
        "primary": [],
        "exploratory": {},
        "band_accuracy": {},
        "depth_gain": {},
        "extrapolation": {},
        "versus_reference": {},
        "solved": {},
        "collapse": {},
        "accuracy_by_difficulty": {},
        "kl_exit": {},
    }
    for s in schedules:
        out["band_accuracy"][s] = {
            name: {
                role: {
                    str(d): over_seeds(values(s, name, role, d), bounds=ACCURACY).to_dict()
                    for d in depths
                }
                for role in out["sets"][name]["bands"]
            }
            for name in set_names
        }
        out["depth_gain"][s] = difference(STANDARD, "hard", (s, TRAINING_DEPTH), (s, 1))
        out["extrapolation"][s] = {
            role: difference(STANDARD, role, (s, deepest), (s, TRAINING_DEPTH))
            for role in ("near", "far")
            if role in out["sets"]["standard"]["bands"]
        }
        if out["reference"] is not None and s != REFERENCE:
            out["versus_reference"][s] = {
                name: {
                    f"{role}@{depth}": difference(name, role, (s, depth), (REFERENCE, depth))
                    for role, depth in cells
                    if role in out["sets"][name]["bands"]
                }
                for name in set_names
            }
        out["solved"][s] = _solved(seeds[s], depths, deepest)
        out["collapse"][s] = _collapse(seeds[s], depths, max_ops)
        out["accuracy_by_difficulty"][s] = {
            STANDARD: {
                str(d): np.mean(
                    [r["scores"]["sets"][STANDARD]["accuracy"][str(d)] for r in seeds[s].values()],
                    axis=0,
                ).tolist()
                for d in depths
            }
        }
        out["kl_exit"][s] = _kl_exit(seeds[s], first["sets"]["standard"]["bands"])
    out["extrapolates_best"] = _best(out, difference, deepest)
    out["primary"] = [_primary(p, values) for p in primary]
    out["exploratory"] = _correct(family, {claim_key(p): p.name for p in primary})
    if out["extrapolates_best"] is not None:
        against = out["extrapolates_best"]["against"].values()
        out["extrapolates_best"]["holds"] = all(
            d is not None and decided(d) == "positive" for d in against
        )
    return out


def decided(d: dict[str, Any]) -> str:
    """The side a difference's verdict takes: Holm's for an exploratory one, its own interval's
    for one that is a primary comparison (positive, negative, cannot tell)."""
    return d["holm"] if "holm" in d else d["sign"]


def claim_key(p: Claim) -> Key:
    """The difference a primary claim decides (on the standard set), as the family keys it."""
    assert p.b is not None and p.a_depth is not None and p.b_depth is not None
    return difference_key(STANDARD, p.of, (p.a, p.a_depth), (p.b, p.b_depth))


def _primary(p: Claim, values) -> dict[str, Any]:
    assert p.b is not None
    d = same_seed_difference(
        values(p.a, STANDARD, p.of, p.a_depth), values(p.b, STANDARD, p.of, p.b_depth)
    )
    verdict = None if d is None else primary_verdict(d["low"], d["high"], p.bar)
    return {**BAND_CLAIMS.write(p), "difference": d, "verdict": verdict}


def _correct(family: dict[Key, list[dict[str, Any]]], primary: dict[Key, str]) -> dict[str, Any]:
    """Mark the differences that are primary comparisons; correct the others, each distinct
    difference once, over all of them (a difference computed twice, as a - b or b - a, shares
    its p-value and is rejected or not with its first)."""
    kept = {key: found for key, found in family.items() if key not in primary}
    for key in family.keys() & primary.keys():
        for d in family[key]:
            d["primary"] = primary[key]
    correct_family([found[0] for found in kept.values()])
    for first, *again in kept.values():
        for d in again:
            d["p"] = first["p"]
            kept_side = first["holm"] not in ("cannot tell", ZERO_EVERYWHERE)
            d["holm"] = d["sign"] if kept_side else first["holm"]
    return family_counts([found[0] for found in kept.values()])


def _solved(runs: dict[int, dict[str, Any]], depths: list[int], deepest: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for what, pick in (
        (f"K={TRAINING_DEPTH}", lambda r: TRAINING_DEPTH),
        (f"K={deepest}", lambda r: deepest),
        ("chosen", lambda r: chosen_depth(r, depths)),
    ):
        if what.startswith("K=") and int(what[2:]) not in depths:
            continue
        per_seed = {s: pick(r) for s, r in runs.items()}
        solved = {
            s: float(solved_up_to(r["scores"]["sets"]["standard"]["accuracy"][str(per_seed[s])]))
            for s, r in runs.items()
        }
        out[what] = {"depths": per_seed, **over_seeds(solved).to_dict()}
    return out


def _collapse(runs: dict[int, dict[str, Any]], depths: list[int], max_ops: int) -> dict[str, Any]:
    """Per seed: the smallest in-range accuracy at COLLAPSE_DEPTHS as a share of that at
    COLLAPSE_FROM, and whether it is at most a half."""
    measured = [d for d in COLLAPSE_DEPTHS if d in depths]
    if COLLAPSE_FROM not in depths or not measured:
        return {}
    kept = {}
    for s, r in runs.items():
        base = in_range_accuracy(r, COLLAPSE_FROM, max_ops)
        kept[s] = min(in_range_accuracy(r, d, max_ops) for d in measured) / base
    return {
        "kept": over_seeds(kept).to_dict(),
        "collapsed_seeds": sorted(s for s, k in kept.items() if k <= 0.5),
    }


def _kl_exit(runs: dict[int, dict[str, Any]], bands: dict[str, dict[str, Any]]) -> dict[str, Any]:
    exits = {s: r["scores"]["kl_exit"] for s, r in runs.items()}
    first = next(iter(exits.values()))
    return {
        "threshold": first["threshold"],
        "max_depth": first["max_depth"],
        "accuracy": np.mean([e["accuracy"] for e in exits.values()], axis=0).tolist(),
        "mean_depth": np.mean([e["mean_depth"] for e in exits.values()], axis=0).tolist(),
        "bands": {
            role: {
                what: over_seeds(
                    {
                        s: float(np.mean(e[what][bands[label]["low"] : bands[label]["high"] + 1]))
                        for s, e in exits.items()
                    },
                    bounds=ACCURACY if what == "accuracy" else (1.0, float(first["max_depth"])),
                ).to_dict()
                for what in ("accuracy", "mean_depth")
            }
            for role, label in band_roles(bands).items()
        },
    }


def _best(out: dict[str, Any], difference, deepest: int) -> dict[str, Any] | None:
    """The schedule with the highest mean `near` accuracy at the deepest depth, and its same-seed
    differences to every other schedule; "best" holds only when all of them are positive (after
    the correction: `analyse` sets `holds`)."""
    schedules = out["schedules"]
    if "near" not in out["sets"]["standard"]["bands"] or len(schedules) < 2:
        return None
    means = {
        s: out["band_accuracy"][s]["standard"]["near"][str(deepest)]["mean"] for s in schedules
    }
    top = max(schedules, key=lambda s: means[s])
    against = {
        s: difference(STANDARD, "near", (top, deepest), (s, deepest)) for s in schedules if s != top
    }
    return {"schedule": top, "depth": deepest, "against": against, "holds": False}
