"""What the bios experiment's recall supports, over seeds, by rules fixed before the numbers.

Every arm trains once per seed; a cell is recalled bits per person at one (arm, budget fraction,
serving depth) with its 95% t-interval over seeds, cut at 0 and the ceiling (recall cannot leave
them; `evidence.over_seeds`). The rules (the regime, collapse, same-seed comparisons, the least
recall over deep serving depths against the ceiling) are docs/design.md §5, "bios: where recall
runs through the loop"; their bars are the constants below. The preset's primary claims
(`BIOS_CLAIMS`) are each decided by their own interval; every same-seed difference (every
pair of arms, every budget fraction: recall averaged over serving depths, averaged off depth
over 8..64 where Figure 1 contrasts fixed-first with fixed K = 4, and at depths 4 and the
deepest) is exploratory, its verdict corrected over all of them by Holm's method
(`kit/claims.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any, TypeVar

import numpy as np

from fixedfirst.config.schema import require
from fixedfirst.stats.evidence import over_seeds
from fixedfirst.studies.kit.claims import (
    Claim,
    ClaimTable,
    bar_verdict,
    correct_family,
    family_counts,
    same_seed_difference,
)

T = TypeVar("T")

REGIME_CEILING = 0.8
REGIME_SHALLOW = 0.5
COLLAPSE = 0.5
NOTHING = 0.1
COLLAPSE_DEPTHS = range(8, 65)
COMPARISONS = (
    ("fixed-first-4-0.8", "uniform-1-16"),
    ("fixed-first-4-0.8", "fixed-4"),
    ("fixed-4", "uniform-1-16"),
    ("fixed-first-2-0.67", "uniform-1-16"),
    ("fixed-first-2-0.67", "fixed-first-4-0.8"),
    ("fixed-first-4-0.8", "fixed-first-4-0.8-wsd"),
    ("fixed-first-2-0.67", "fixed-4"),
    ("fixed-first-4-0.8-wsd", "fixed-4"),
    ("fixed-first-4-0.8-wsd", "uniform-1-16"),
    ("fixed-first-2-0.67", "fixed-first-4-0.8-wsd"),
)
"""(a, b) pairs compared as a - b, when both arms ran: every pair of the presets' five arms,
fixed-first before fixed before uniform (the first six are the ones the first reports had)."""
FIXED = "fixed-4"
"""The fixed-depth arm Figure 1 contrasts every fixed-first arm with, off its depth."""
QUANTITY_WORDS = {
    "least_of_ceiling": "least recall over serving depths {deep} as a share of the ceiling",
    "mean_of_ceiling": "recall averaged over serving depths as a share of the ceiling",
    "kept_of_depth_4": "least recall over serving depths {collapse} as a share of that at depth 4",
}
"""Each quantity in words, for the report ({deep} and {collapse}: the depths it reads)."""
SHARE = (0.0, 1.0)
QUANTITY_BOUNDS: dict[str, tuple[float, float]] = {
    "least_of_ceiling": SHARE,
    "mean_of_ceiling": SHARE,
    "kept_of_depth_4": (0.0, float("inf")),  # a deeper depth may recall more than depth 4
}
"""The range each quantity cannot leave; its interval over seeds is cut there (`over_seeds`)."""


BIOS_CLAIMS = ClaimTable(
    "primary",
    "A `[[experiment.primary]]` table of a bios preset: one arm's recall at the full budget, seed "
    "by seed, claimed against a bar, named before the runs and decided by its own 95% interval "
    "over seeds (outside the exploratory family).",
    {"name": "name", "arm": "a", "quantity": "of", "claim": "side", "bar": "bar"},
    required=("name", "arm", "quantity", "claim", "bar"),
    choices={"quantity": tuple(QUANTITY_WORDS), "claim": ("at least", "below")},
    meaning={
        "quantity": "least_of_ceiling: the arm's least recall over serving depths 2..64 as a "
        "share of the ceiling; mean_of_ceiling: its recall averaged over serving depths, a share "
        "of the ceiling; kept_of_depth_4: its least recall over depths 8..64 as a share of its "
        "recall at depth 4 (seeds recalling under 10% of the ceiling at depth 4 left out, as the "
        "collapse rule does).",
        "claim": "The side of `bar` claimed: holds when the interval lies wholly on it (at or "
        'above the bar for "at least", under it for "below"), does not hold when wholly on the '
        "other side, else cannot tell.",
        "bar": "The bar, a share (0.95 for 95%).",
    },
)


def check_claim(claim: Claim, depths: list[int]) -> None:
    """Refuse a bar that is no share, or depths the claim's quantity cannot read."""
    s = BIOS_CLAIMS.section
    require(
        claim.bar is not None and 0 < claim.bar <= 1,
        f"{s}.bar",
        f"a share in (0, 1], got {claim.bar}",
    )
    needs = {
        "least_of_ceiling": any(d >= 2 for d in depths),
        "mean_of_ceiling": True,
        "kept_of_depth_4": 4 in depths and any(d in COLLAPSE_DEPTHS for d in depths),
    }
    require(
        needs[claim.of],
        f"{s}.quantity",
        f"{claim.of} ({claim.name}) needs serving depths "
        + ("4 and one in 8..64" if claim.of == "kept_of_depth_4" else "of 2 or more")
        + f" in experiment.depths, got {depths}",
    )


def bits_table(results: dict[str, Any]) -> dict[tuple[str, float, int], dict[int, float]]:
    """(arm, budget fraction, seed) -> serving depth -> recalled bits per person."""
    table: dict[tuple[str, float, int], dict[int, float]] = {}
    for r in results["recall"]:
        key = (r["schedule"], r["budget_fraction"], r["seed"])
        table.setdefault(key, {})[r["depth"]] = r["bits_per_person"]
    return table


def analyse(results: dict[str, Any]) -> dict[str, Any]:
    table = bits_table(results)
    ceiling = results["ceiling_bits"]
    fractions = results["budget_fractions"]
    depths = results["depths"]
    arms = list(dict.fromkeys(r["schedule"] for r in results["recall"]))
    seeds = sorted({r["seed"] for r in results["recall"]})
    final = fractions[-1]

    def per_seed(arm: str, fraction: float, value: Callable[[dict[int, float]], T]) -> dict[int, T]:
        return {s: value(table[(arm, fraction, s)]) for s in seeds if (arm, fraction, s) in table}

    def mean_over_depths(row: dict[int, float]) -> float:
        return float(np.mean([row[d] for d in depths]))

    bits = (0.0, ceiling)
    out: dict[str, Any] = {
        "arms": arms,
        "seeds": seeds,
        "ceiling_bits": ceiling,
        "pairs": {
            "compared": sum(a in arms and b in arms for a, b in COMPARISONS),
            "possible": len(arms) * (len(arms) - 1) // 2,
        },
        "cells": {
            arm: {
                f"{fraction:g}": {
                    "by_depth": {
                        str(d): over_seeds(
                            per_seed(arm, fraction, itemgetter(d)), bounds=bits
                        ).to_dict()
                        for d in depths
                    },
                    "mean_over_depths": over_seeds(
                        per_seed(arm, fraction, mean_over_depths), bounds=bits
                    ).to_dict(),
                }
                for fraction in fractions
                if per_seed(arm, fraction, mean_over_depths)
            }
            for arm in arms
        },
        "comparisons": [],
        "collapse": {},
        "at_ceiling": {},
        "regime": None,
        "learning_rate": {},
        "primary": [],
        "exploratory": {},
    }
    off_depth = [d for d in depths if d in COLLAPSE_DEPTHS]

    def mean_off_depth(row: dict[int, float]) -> float:
        return float(np.mean([row[d] for d in off_depth]))

    for a, b in COMPARISONS:
        if a not in arms or b not in arms:
            continue
        for fraction in fractions:
            entry = {"a": a, "b": b, "fraction": fraction}
            for what, value in (
                ("mean_over_depths", mean_over_depths),
                ("mean_off_depth", mean_off_depth),
                ("depth_4", lambda r: r[4]),
                (f"depth_{max(depths)}", lambda r: r[max(depths)]),
            ):
                if (what == "depth_4" and 4 not in depths) or (
                    what == "mean_off_depth" and not off_depth
                ):
                    continue
                entry[what] = same_seed_difference(
                    per_seed(a, fraction, value), per_seed(b, fraction, value)
                )
            out["comparisons"].append(entry)
    if 4 in depths:
        for arm in arms:
            out["collapse"][arm] = _collapse(per_seed(arm, final, dict), ceiling)
        if "fixed-4" in arms and 1 in depths:
            out["regime"] = _regime(per_seed("fixed-4", final, dict), ceiling)
    deep = [d for d in depths if d >= 2]

    def least_of_ceiling(arm: str) -> dict[int, float]:
        return per_seed(arm, final, lambda r: min(r[d] for d in deep) / ceiling)

    for arm in arms:
        least = least_of_ceiling(arm)
        out["at_ceiling"][arm] = {
            "depths": [min(deep), max(deep)],
            **over_seeds(least, bounds=SHARE).to_dict(),
        }
    quantities: dict[str, Callable[[str], dict[int, float]]] = {
        "least_of_ceiling": least_of_ceiling,
        "mean_of_ceiling": lambda arm: per_seed(
            arm, final, lambda r: mean_over_depths(r) / ceiling
        ),
        "kept_of_depth_4": lambda arm: {
            int(s): k["kept"] for s, k in out["collapse"][arm]["per_seed"].items()
        },
    }
    for p in (BIOS_CLAIMS.read(p) for p in results["primary"]):
        out["primary"].append(_primary(p, quantities[p.of](p.a), depths))
    out["off_depth"] = [min(off_depth), max(off_depth)] if off_depth else None
    family = [
        d
        for c in out["comparisons"]
        for key, d in c.items()
        if key not in ("a", "b", "fraction") and d is not None
    ]
    correct_family(family)
    out["exploratory"] = family_counts(family)
    for name, run in results["runs"].items():
        switch = run.get("switch") or {}
        if "lr" in switch:
            out["learning_rate"][name] = {
                "lr_schedule": run.get("lr_schedule"),
                "at_switch": switch["lr"],
                "mean_finish": switch["mean_finish_lr"],
                "peak": switch["peak_lr"],
            }
    return out


def _primary(p: Claim, values: dict[int, float], depths: list[int]) -> dict[str, Any]:
    """The claim's quantity over seeds and its verdict (None with fewer than two seeds)."""
    deep = [d for d in depths if d >= 2]
    collapse = [d for d in depths if d in COLLAPSE_DEPTHS]
    words = QUANTITY_WORDS[p.of].format(
        deep=f"{min(deep, default=0)}..{max(deep, default=0)}",
        collapse=f"{min(collapse, default=0)}..{max(collapse, default=0)}",
    )
    scored = over_seeds(values, bounds=QUANTITY_BOUNDS[p.of]) if values else None
    verdict = None
    if scored is not None and scored.low is not None and scored.high is not None:
        assert p.bar is not None
        side = bar_verdict(scored.low, scored.high, p.bar)
        claimed = "meets the bar" if p.side == "at least" else "below the bar"
        verdict = (
            "cannot tell"
            if side == "cannot tell"
            else "holds"
            if side == claimed
            else "does not hold"
        )
    return {
        **BIOS_CLAIMS.write(p),
        "quantity_words": words,
        "over_seeds": None if scored is None else scored.to_dict(),
        "verdict": verdict,
    }


def _collapse(rows: dict[int, dict[int, float]], ceiling: float) -> dict[str, Any]:
    """Per seed: the least recall at COLLAPSE_DEPTHS as a share of depth 4's, and whether that is
    a collapse; seeds recalling too little at depth 4 are left out (and named)."""
    kept, judged_out = {}, []
    for seed, row in rows.items():
        if row[4] < NOTHING * ceiling:
            judged_out.append(seed)
            continue
        deep = {d: v for d, v in row.items() if d in COLLAPSE_DEPTHS}
        worst = min(deep, key=deep.__getitem__)
        kept[seed] = {"depth": worst, "kept": deep[worst] / row[4]}
    return {
        "per_seed": {str(s): k for s, k in kept.items()},
        "collapsed_seeds": sorted(s for s, k in kept.items() if k["kept"] <= COLLAPSE),
        "too_little_to_judge": sorted(judged_out),
    }


def _regime(rows: dict[int, dict[int, float]], ceiling: float) -> dict[str, Any]:
    per_seed = {}
    for seed, row in rows.items():
        at4, at1 = row[4] / ceiling, (row[1] / row[4] if row[4] > 0 else float("inf"))
        per_seed[str(seed)] = {
            "depth_4_of_ceiling": at4,
            "depth_1_of_depth_4": at1,
            "holds": at4 >= REGIME_CEILING and at1 <= REGIME_SHALLOW,
        }
    return {
        "ceiling_share": REGIME_CEILING,
        "shallow_share": REGIME_SHALLOW,
        "per_seed": per_seed,
        "holds_in_every_seed": all(p["holds"] for p in per_seed.values()),
    }
