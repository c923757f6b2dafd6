"""Arms scored by held-out NLL per token at each serving depth, on text: the same rules as the arms
scored on chains (studies/kit/depth_arms.py), with NLL in place of a band's accuracy.

A run on `tokens` data is scored on held-out rows of its validation split drawn by its training
seed (`data/source.held_out_rows`): every arm of one seed scores the same rows, and each seed its
own draw, so that an interval over seeds covers the held-out sample too (docs/design.md,
"intervals"). The seed is the unit: an arm's NLL at a depth has a 95% t-interval over seeds, a
comparison is the same-seed difference a - b (lower is better: a negative difference says a
predicts the held-out text better), the primary comparisons named in the preset before the runs
are decided each by its own interval, and every other difference with the reference is
exploratory, corrected over all of them by Holm's method (`claims.py`).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from fixedfirst.config import RunConfig
from fixedfirst.stats.evidence import over_seeds
from fixedfirst.studies.kit.claims import Claim, ClaimTable, compare_arms

NLL = "nll"
"""The quantity every claim of `NLL_CLAIMS` compares (its `of`)."""
NLL_CLAIMS = ClaimTable(
    "nll_primary",
    "A finishing preset's [[experiment.nll_primary]] table, for runs on `tokens` data: seed by "
    "seed, arm a's held-out NLL per token at a_depth minus arm b's at b_depth, on the rows of "
    "the validation split drawn by the seed. Lower is better: a negative difference says a "
    "predicts the held-out text better.",
    {
        "name": "name",
        "a": "a",
        "a_depth": "a_depth",
        "b": "b",
        "b_depth": "b_depth",
        "bar": "bar",
    },
    required=("name", "a", "a_depth", "b", "b_depth"),
    fixed={"of": NLL, "unit": "nats per token"},
    meaning={
        "bar": "Unset: decided by the interval's side: `lower` (a's NLL below b's, a better), "
        "`higher` (a worse) or cannot tell. A number in nats per token: claimed at least that "
        "difference (a negative bar claims a better by at least its size; 'meets the bar' when "
        "the interval's lower end is at or above it, 'below the bar' when its upper end is under "
        "it, otherwise cannot tell).",
    },
)


def score_held_out_nll(run: Path, depths: list[int], rows: int) -> dict[str, Any]:
    """The newest checkpoint's held-out NLL per token at `depths`, in fp32, on `rows` rows of
    the validation split drawn by the run's training seed (cached beside the run as its
    evaluation file, evaluation/cached.py)."""
    from fixedfirst.evaluation.cached import HeldOut, cached_evaluation
    from fixedfirst.runs.opening import find_checkpoint

    config, _ = find_checkpoint(run)
    held_out = HeldOut(rows=rows, seed=config.train.seed, precision="fp32")
    result, _ = cached_evaluation(run, sorted(set(depths)), held_out)
    return {
        "step": result["step"],
        "validation_seed": result["validation_seed"],
        "rows": result["rows"],
        "scored_tokens": result["scored_tokens"],
        "validation_sha256": result["validation_sha256"],
        "nll": result["nll_by_depth"],
    }


def _nll(run: dict[str, Any], depth: int) -> float:
    return float(run["scores"]["nll"][str(depth)])


def analyse_nll_arms(
    runs: dict[str, dict[str, Any]],
    depths: list[int],
    reference: str,
    compare_depths: list[int],
    primary: list[Claim],
) -> dict[str, Any]:
    """runs: name -> {"arm", "seed", "scores"}; every arm's NLL at every depth over seeds, each
    arm minus `reference` at each of `compare_depths` (the exploratory family, Holm-corrected),
    and the primary comparisons."""
    arms = list(dict.fromkeys(r["arm"] for r in runs.values()))
    by_arm = {a: {r["seed"]: r for r in runs.values() if r["arm"] == a} for a in arms}

    def values(arm: str, of: str, depth: int) -> dict[int, float]:
        return {s: _nll(r, depth) for s, r in by_arm[arm].items()}

    cells = [(NLL, depth) for depth in compare_depths]
    compared = compare_arms(arms, reference, cells, values, primary, NLL_CLAIMS)
    return {
        "arms": arms,
        "seeds": sorted({r["seed"] for r in runs.values()}),
        "reference": reference,
        "nll": {
            arm: {str(d): over_seeds(values(arm, NLL, d)).to_dict() for d in depths} for arm in arms
        },
        "versus_reference": compared.versus,
        "primary": compared.primary,
        "exploratory": compared.exploratory,
    }


def nll_results(
    format: str,
    preset: str,
    reference: str,
    experiment: Any,
    first: RunConfig,
    runs: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """The results document of a study of arms on text: its settings (`first` its first run's
    configuration; the data named by its directory's name), every run, and their
    `analyse_nll_arms` over the experiment's `depths`, `compare_depths` and `nll_primary`."""
    e = experiment
    data = first.data
    return {
        "format": format,
        "version": 1,
        "preset": preset,
        "reference": reference,
        "flop_budget": e.flops,
        "model": asdict(first.model),
        "data": {
            "kind": data.kind,
            "name": Path(str(data.path)).name,
            "seq_len": first.train.seq_len,
        },
        "experiment": e.to_dict(),
        "runs": runs,
        "analysis": analyse_nll_arms(runs, e.depths, reference, e.compare_depths, e.nll_primary),
    }
