"""What the router does by depth, over seeds: each arm's expert shares per pass, how unevenly it
spreads the tokens, and how far a fixed-first run's routing moved between its switch and its end.

Expert indices are not comparable across seeds (each initialisation labels its experts its own
way), so what is averaged over seeds is a quantity that does not depend on the labels: at each
pass, the share of the busiest expert (`top_share`; 1/experts is an even spread) and the total
variation distance between two passes' shares of one run (how much the router reroutes from one
pass to the next, `pass_change`), and for a fixed-first run the total variation distance between
its switch and its final shares at each pass (`switch_change`). Each is a 95% interval over seeds
(`stats.evidence.over_seeds`); the raw shares stay in each run's entry of results.json.
"""

from __future__ import annotations

from typing import Any

from fixedfirst.stats.evidence import over_seeds

SHARE = (0.0, 1.0)
"""A share and a total variation distance both lie in [0, 1]."""


def total_variation(p: list[float], q: list[float]) -> float:
    """Half the L1 distance between two share vectors over the same experts."""
    return 0.5 * sum(abs(a - b) for a, b in zip(p, q, strict=True))


def _interval(values: dict[int, float]) -> dict[str, Any]:
    return over_seeds(values, bounds=SHARE).to_dict()


def analyse_router(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per arm and loop layer: per pass (1-based, as strings) the busiest expert's share, the
    change from the pass before, and (fixed-first arms) the change since the switch."""
    arms = list(dict.fromkeys(r["arm"] for r in runs.values()))
    out: dict[str, Any] = {}
    for arm in arms:
        seeds = {r["seed"]: r["router"] for r in runs.values() if r["arm"] == arm}
        first = next(iter(seeds.values()))["final"]["shares"]
        out[arm] = {}
        for layer, passes in first.items():
            depth = len(passes)

            def final(router: dict[str, Any], p: int, layer: str = layer) -> list[float]:
                return router["final"]["shares"][layer][p]

            entry: dict[str, Any] = {
                "top_share": {
                    str(p + 1): _interval({s: max(final(r, p)) for s, r in seeds.items()})
                    for p in range(depth)
                },
                "pass_change": {
                    str(p + 1): _interval(
                        {s: total_variation(final(r, p - 1), final(r, p)) for s, r in seeds.items()}
                    )
                    for p in range(1, depth)
                },
                "switch_change": None,
            }
            switched = {s: r["switch"] for s, r in seeds.items() if r["switch"] is not None}
            if len(switched) == len(seeds):
                entry["switch_change"] = {
                    str(p + 1): _interval(
                        {
                            s: total_variation(sw["shares"][layer][p], final(seeds[s], p))
                            for s, sw in switched.items()
                        }
                    )
                    for p in range(depth)
                }
            out[arm][layer] = entry
    return out
