"""Claims of the paper, each a sentence and a test the sweep's seeds decide.

A sweep file may list `[[claims]]` (spec.py checks them when it loads): a sentence, two
[[runs]] entries a and b, the metric compared (the sweep's metric, or its value at one serving
depth), the paired quantity (a[s] / b[s] - 1 or a[s] - b[s], seed by seed) and the side of a
bound the sentence puts it on. The quantity's mean over the seeds both entries finished and its
95% t-interval decide the verdict (`evidence.verdict`): reproduced when the whole interval lies
on the claimed side, not reproduced when it lies wholly on the other, and otherwise the seeds
cannot tell. Which side is "better" is the sentence's business: NLL falls and a task's score
rises as a model improves, so the file says "below" or "above", never this code.

A table tests its claims together, so each verdict is corrected for the others: the primary
claims form one family and the exploratory ones another, and in each a claim keeps its side only
where Holm's method rejects its bound at 5% family-wise error (each claim's two-sided p-value
against its bound), else "cannot tell". The interval shown stays the claim's own, uncorrected.
"""

from __future__ import annotations

from typing import Any, Literal

from fixedfirst.config.schema import require
from fixedfirst.stats.evidence import (
    LEVEL,
    common_seeds,
    holm,
    paired,
    paired_over_rows,
    paired_relative,
    two_sided_p,
    verdict,
)
from fixedfirst.studies.kit.claims import Claim, ClaimTable
from fixedfirst.studies.sweep.seed_table import (
    group_values,
    quantity_name,
    what_intervals_cover,
)

MEASURES = ("relative", "difference")
"""relative: a[s] / b[s] - 1 for each seed; difference: a[s] - b[s]."""
DEPTH_PREFIX = "depth:"


CLAIMS = ClaimTable(
    "claims",
    "A `[[claims]]` table of a sweep file: a sentence of the paper and the paired quantity, over "
    "seeds, that decides it (needs `[sweep] seeds`).",
    {
        "text": "name",
        "a": "a",
        "b": "b",
        "measure": "measure",
        "claim": "side",
        "bound": "bar",
        "metric": "of",
        "primary": "primary",
        "caveat": "caveat",
    },
    ("text", "a", "b", "measure", "claim", "bound"),
    choices={"claim": ("above", "below")},
    defaults={"metric": "mean"},
    meaning={
        "claim": "The side of `bound` the sentence puts the quantity on: `above` or `below`.",
        "bound": 'The bound, e.g. 0.005 for "within 0.5%" with `relative` and `below`.',
        "metric": "`mean`: the sweep's metric (mean serving NLL, or the task's metric); "
        "`depth:K`: its value at serving depth K (one of the evaluated depths).",
        "caveat": "What the verdict does not say, in a few words, printed beside it in "
        "claims.md: e.g. that the baseline it beats turned out unhealthy (found after the run; "
        "the verdict is left as the numbers give it).",
    },
)


def read_claim(raw: Any) -> Claim:
    """A [[claims]] table, its metric one the sweep measures."""
    from fixedfirst.evaluation.nll import EVAL_DEPTHS

    claim = CLAIMS.read(raw)
    depths = [f"{DEPTH_PREFIX}{d}" for d in EVAL_DEPTHS]
    require(
        claim.of == "mean" or claim.of in depths,
        "claims.metric",
        f'{claim.of!r}: use "mean" (the sweep\'s metric) or "depth:K" with K one of the '
        f"evaluated depths {', '.join(map(str, EVAL_DEPTHS))}",
    )
    return claim


def claim_depth(claim: Claim) -> int | None:
    """The serving depth a claim's metric is read at (None: the sweep's metric itself)."""
    return int(claim.of[len(DEPTH_PREFIX) :]) if claim.of != "mean" else None


def quantity(claim: Claim, metric: str, score_name: str | None) -> str:
    """The paired quantity in words, e.g. "a/b - 1 of mean serving NLL"."""
    of = quantity_name(metric, score_name, claim_depth(claim))
    if claim.measure == "relative":
        return f"{claim.a}/{claim.b} - 1 of {of}"
    return f"{claim.a} - {claim.b} of {of}"


def evaluate_claims(
    claims: list[Claim], rows: list[dict[str, Any]], metric: str, score_name: str | None
) -> list[dict[str, Any]]:
    """Each claim's paired quantity over the seeds both entries finished, and its verdict."""
    results = []
    for c in claims:
        assert c.b is not None and c.bar is not None
        side: Literal["above", "below"] = "below" if c.side == "below" else "above"
        a = group_values(rows, c.a, metric, claim_depth(c))
        b = group_values(rows, c.b, metric, claim_depth(c))
        seeds = common_seeds(a, b)
        result: dict[str, Any] = {
            "text": c.name,
            "a": c.a,
            "b": c.b,
            "metric": c.of,
            "measure": c.measure,
            "claim": c.side,
            "bound": c.bar,
            "quantity": quantity(c, metric, score_name),
            "seeds": seeds,
            "n": len(seeds),
            "mean": None,
            "low": None,
            "high": None,
            "verdict": "cannot tell",
        }
        if c.measure == "relative" and any(b[s] == 0 for s in seeds):
            result["note"] = f"{c.b} scored 0 for a seed: no ratio a/b"
        elif len(seeds) >= 2:
            blocks = _blocks(rows, c, metric)
            if blocks is not None:
                crossed = paired_over_rows(*blocks, relative=c.measure == "relative")
                low, high, se, df = crossed.low, crossed.high, crossed.se, crossed.df
                interval_mean, covers = crossed.mean, "seeds and held-out blocks"
                decided = verdict(crossed, side, c.bar)
            else:
                interval = (paired_relative if c.measure == "relative" else paired)(a, b)
                low, high, se, df = (
                    interval.low,
                    interval.high,
                    interval.sd / interval.n**0.5,
                    interval.n - 1,
                )
                interval_mean, covers = interval.mean, "seeds"
                decided = verdict(interval, side, c.bar)
            result.update(
                mean=interval_mean,
                low=low,
                high=high,
                verdict=decided,
                p=two_sided_p(interval_mean, se, df, c.bar),
                covers=covers,
            )
        elif seeds:  # one seed: its value, but no interval to decide with
            (s,) = seeds
            result["mean"] = a[s] / b[s] - 1.0 if c.measure == "relative" else a[s] - b[s]
        results.append(result)
    for r, c in zip(results, claims, strict=True):
        if c.caveat:
            r["caveat"] = c.caveat
    _correct_families(claims, results)
    return results


def _blocks(
    rows: list[dict[str, Any]], c: Claim, metric: str
) -> tuple[dict[int, list[float]], dict[int, list[float]]] | None:
    """Both entries' values on the shared held-out set's blocks, seed by seed (None where the
    rows hold none: a per-seed or first-rows evaluation, or a task's metric)."""
    if metric != "nll":
        return None
    depth = claim_depth(c)
    key = "mean" if depth is None else str(depth)
    out = []
    for group in (c.a, c.b or ""):
        held = [r for r in rows if r["group"] == group]
        if not held or any(key not in (r.get("heldout_blocks") or {}) for r in held):
            return None
        out.append({int(r["seed"]): r["heldout_blocks"][key] for r in held})
    return out[0], out[1]


def _correct_families(claims: list[Claim], results: list[dict[str, Any]]) -> None:
    """Each family's verdicts (the primary claims, the exploratory ones) by Holm's method over
    the claims of it that have an interval: a side only where the corrected test against the
    bound rejects."""
    for primary in (True, False):
        family = [r for c, r in zip(claims, results, strict=True) if c.primary == primary]
        family = [r for r in family if "p" in r]
        name = "primary" if primary else "exploratory"
        for r, rejected in zip(family, holm([r["p"] for r in family]), strict=True):
            r["family"] = f"{name}, Holm over {len(family)}"
            if not rejected:
                r["verdict"] = "cannot tell"


def _value(result: dict[str, Any], value: float | None, signed: bool = True) -> str:
    if value is None:
        return "–"
    if result["measure"] == "relative":
        return f"{100 * value:+.2f}%" if signed else f"{100 * value:.2f}%"
    return f"{value:+.4f}" if signed else f"{value:.4f}"


def verdict_words(result: dict[str, Any]) -> str:
    """reproduced, not reproduced, or cannot tell at n seeds."""
    if result["verdict"] == "cannot tell":
        return f"cannot tell at {result['n']} seed{'s' if result['n'] != 1 else ''}"
    return result["verdict"]


def claims_markdown(results: list[dict[str, Any]], metric: str) -> str:
    """claims.md: each claim's sentence, the paired quantity's mean and interval, the verdict."""
    lines = [
        "| claim | quantity | mean | 95% interval | n | claimed | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        interval = "–" if r["low"] is None else f"[{_value(r, r['low'])}, {_value(r, r['high'])}]"
        cells = [
            r["text"],
            r["quantity"],
            _value(r, r["mean"]),
            interval,
            str(r["n"]),
            f"{r['claim']} {_value(r, r['bound'])}",
            f"**{verdict_words(r)}**"
            + "".join(f" ({r[k]})" for k in ("note", "family", "caveat") if r.get(k)),
        ]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    crossed = any(r.get("covers") == "seeds and held-out blocks" for r in results)
    interval = (
        f"its two-sided {LEVEL:.0%} interval crossed over the seeds and the shared held-out "
        "set's blocks (docs/design.md §4)"
        if crossed
        else f"its two-sided {LEVEL:.0%} t-interval"
    )
    lines += [
        "",
        "Quantity: for each seed both entries finished, a/b - 1 (in %) or a - b of the metric "
        f"named; mean: its mean over those n seeds; interval: {interval} (none for fewer than 2 "
        "seeds). Verdict: reproduced when the whole interval lies on the claimed side of the "
        "bound, not reproduced when it lies wholly on the other side, otherwise the seeds cannot "
        "tell; corrected for testing the table's claims together by Holm's method, over the "
        "primary claims as one family and the exploratory ones as another (5% family-wise "
        "error in each; the interval shown is the claim's own, uncorrected), so a claim whose "
        'interval is on one side but whose corrected test does not reject is "cannot tell". '
        + what_intervals_cover(metric, crossed),
    ]
    return "\n".join(lines) + "\n"
