"""The sweep's results: one row per finished run, written as `results.json` and `table.md`.

Every number in a row comes from somewhere a reader can check: tokens and wall-clock from the
run's `summary.json` (wall-clock counts training steps only, not evaluation or checkpoints);
modeled FLOPs are the training FLOPs of the depths the run drew under the compute model (the
quantity compute-matched runs are planned with, and what the wall-clock follows), shown beside the
FLOP budget of a compute-matched run; modeled savings from `RunPlan.modeled_savings` (the
schedule's expected FLOPs against uniform 1..16's at the same token budget); NLL from
the run's saved evaluation JSON (`run_eval`). Savings in wall-clock and the NLL difference are
relative to the sweep's reference run.
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

import torch

from fixedfirst.compute.run_cost import run_plan
from fixedfirst.evaluation.nll import SERVING_RANGE
from fixedfirst.files.writing import write_text_atomic
from fixedfirst.schedules import describe
from fixedfirst.studies.kit.runs import PlannedRun

RESULTS_FORMAT = "fixedfirst-sweep-results"
RESULTS_VERSION = 4
ROW_FROM = "row_from"
"""The key of a row read from an earlier results.json (`--rows-from`): that file's path."""
TABLE_DEPTHS = (1, 4, 16, 32, 64)
"""NLL columns of table.md (results.json holds every evaluated depth)."""


def schedule_label(planned: PlannedRun, flops_of: str | None) -> str:
    label = describe(planned.config.schedule)
    if planned.config.schedule.auto_switch:
        label = label.replace("switch auto", f"switch auto ({planned.config.switch.rule})")
    return f"{label}, compute-matched to {flops_of}" if flops_of else label


def result_row(
    planned: PlannedRun,
    summary: dict[str, Any],
    evaluation: dict[str, Any],
    flops_of: str | None,
    group: str | None = None,
    blocks: int | None = None,
    curve: dict[str, list[float]] | None = None,
) -> dict[str, Any]:
    """One run's numbers, before the comparison with the reference. `switch` is where a
    fixed-first run switched (summary.json's); `compute` adds an auto switch's probes to the
    training FLOPs, what the run cost in all; `blocks`: the shared held-out rows' blocks, whose
    mean serving NLLs the row carries for the intervals; `curve`: its logged training loss."""
    config = planned.config
    switch = summary.get("switch")
    probe_flops = (switch or {}).get("probe_flops", 0.0)
    plan = run_plan(config, summary["total_steps"])
    if switch and switch.get("auto") and switch["step"] is not None:
        plan = plan.decided(switch["step"])
    return {
        "name": planned.name,
        "group": group or planned.name,
        "seed": config.train.seed,
        "schedule": schedule_label(planned, flops_of),
        "kind": config.schedule.kind,
        "schedule_config": config.to_dict()["schedule"],
        "compute_matched_to": flops_of,
        "steps": summary["steps"],
        "tokens": summary["tokens"],
        "modeled_flops": summary["flops"],
        "expected_flops": summary.get("expected_flops"),
        "flop_budget": summary.get("flop_budget"),
        "modeled_savings": plan.modeled_savings(),
        "switch": switch,
        "probe_flops": probe_flops,
        "compute": summary["flops"] + probe_flops,
        "wall": summary["wall"],
        "phases": summary["phases"],
        "eval_step": evaluation["step"],
        "eval_tokens": evaluation["scored_tokens"],
        "eval_sequences": evaluation.get("sequences"),
        "eval_sequences_asked": evaluation.get("rows")
        or evaluation["batches"] * evaluation["batch_size"],
        "validation_seed": evaluation.get("validation_seed"),
        "validation_sha256": evaluation["validation_sha256"],
        "eval_precision": evaluation.get("precision"),
        "nll_by_depth": evaluation["nll_by_depth"],
        "mean_serving_nll": evaluation["mean_serving_nll"],
        **({"heldout_blocks": block_means(evaluation, blocks)} if blocks else {}),
        **({"loss_curve": curve} if curve is not None else {}),
    }


def block_means(evaluation: dict[str, Any], blocks: int) -> dict[str, list[float]]:
    """Each depth's mean NLL over each of `blocks` equal consecutive blocks of the scored rows,
    and ("mean") each block's mean over serving depths 1..16 (rows of equal token counts)."""
    out = {}
    for depth, rows in evaluation["row_nll"].items():
        size = len(rows) // blocks
        if size * blocks != len(rows):
            raise ValueError(f"{len(rows)} rows do not split into {blocks} equal blocks")
        out[depth] = [sum(rows[i * size : (i + 1) * size]) / size for i in range(blocks)]
    if all(str(d) in out for d in SERVING_RANGE):
        serving = [out[str(d)] for d in SERVING_RANGE]
        out["mean"] = [sum(column) / len(serving) for column in zip(*serving, strict=True)]
    return out


def loss_curve(metrics: Path) -> dict[str, list[float]]:
    """A run's logged training steps: step, loss, depth and gradient norm, compact enough to
    commit for every run of a study, so that spikes and divergence can be seen."""
    from fixedfirst.train.metrics import read_metrics

    records = read_metrics(metrics, "train")
    return {
        "step": [r["step"] for r in records],
        "loss": [round(r["loss"], 4) for r in records],
        "depth": [r["depth"] for r in records],
        "grad_norm": [float(f"{r['grad_norm']:.4g}") for r in records],
    }


def by_depth(row: dict[str, Any], metric: str) -> dict[int, float]:
    """The row's metric at each serving depth it was measured at."""
    values = row["task_scores"] if metric == "task" else row["nll_by_depth"]
    return {int(d): float(v) for d, v in values.items()}


def headline(row: dict[str, Any], metric: str) -> float:
    """The metric averaged over serving depths 1..16 (for NLL: the mean serving NLL)."""
    values = by_depth(row, metric)
    return sum(values[d] for d in SERVING_RANGE) / len(SERVING_RANGE)


def compare_to_reference(
    rows: list[dict[str, Any]], reference: str | None, same_seed: bool = False
) -> dict[str, Any] | None:
    """Add wall-clock savings and the relative mean-NLL difference against the reference row,
    or with `same_seed` against the reference entry's row of the row's own seed (None where it
    has not finished). Returns the reference row."""
    ref = next((r for r in rows if r["name"] == reference), None)
    for row in rows:
        against = ref
        if same_seed and ref is not None:
            against = next(
                (r for r in rows if r["group"] == ref["group"] and r["seed"] == row["seed"]), None
            )
        row["wall_savings"] = (
            1.0 - row["wall"] / against["wall"] if against and against["wall"] > 0 else None
        )
        mean, ref_mean = row["mean_serving_nll"], against and against["mean_serving_nll"]
        row["mean_nll_rel_diff"] = mean / ref_mean - 1.0 if mean and ref_mean else None
    return ref


def results_document(
    rows: list[dict[str, Any]], reference: str | None, sweep_path: Path, eval_depths: list[int]
) -> dict[str, Any]:
    return {
        "format": RESULTS_FORMAT,
        "version": RESULTS_VERSION,
        "sweep": str(sweep_path),
        "reference": reference,
        "eval_depths": eval_depths,
        "environment": {
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "machine": platform.machine(),
            "processor": platform.processor() or platform.machine(),
            "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        },
        "runs": rows,
    }


def _percent(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "–"
    return f"{100 * value:+.2f}%" if signed else f"{100 * value:.1f}%"


def _budget(row: dict[str, Any]) -> str:
    budget = row.get("flop_budget")
    if budget is None:
        return "–"
    return f"{budget:.3e} ({100 * row['modeled_flops'] / budget:.2f}%)"


def _nll(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}"


TABLE_COLUMNS = (
    "run",
    "schedule",
    "tokens",
    "modeled FLOPs",
    "FLOP budget",
    "modeled savings",
    "wall-clock (s)",
    "wall-clock savings",
    "mean NLL 1..16",
    "vs reference",
    *(f"NLL K={k}" for k in TABLE_DEPTHS),
)


def table_markdown(
    rows: list[dict[str, Any]],
    reference: str | None,
    missing: list[str],
    same_seed: bool = False,
    shared_rows: bool = False,
) -> str:
    """The schedule table, with a legend saying what each column measures (`same_seed`: each
    row was compared with the reference entry's run of its seed; `shared_rows`: every run
    scored one held-out set, drawn once)."""
    lines = ["| " + " | ".join(TABLE_COLUMNS) + " |", "|" + " --- |" * len(TABLE_COLUMNS)]
    for r in rows:
        name = f"**{r['name']}** (reference)" if r["name"] == reference else r["name"]
        cells = [
            name,
            r["schedule"],
            f"{r['tokens']:,}",
            f"{r['modeled_flops']:.3e}",
            _budget(r),
            _percent(r["modeled_savings"]),
            f"{r['wall']:.1f}",
            _percent(r["wall_savings"]),
            _nll(r["mean_serving_nll"]),
            _percent(r["mean_nll_rel_diff"], signed=True),
            *(_nll(r["nll_by_depth"].get(str(k))) for k in TABLE_DEPTHS),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    eval_tokens = sorted({r["eval_tokens"] for r in rows})
    against = (
        "no reference run (the sweep names none), so no savings or differences"
        if not reference
        else f"savings relative to the reference run `{reference}` on the same machine"
        if not same_seed
        else "savings relative to the reference entry's run of the same seed on the same machine"
    )
    drawn = {int(r["validation_seed"]) for r in rows if r.get("validation_seed") is not None}
    held_out = (
        "one set of validation rows drawn once from the whole validation split (by seed "
        f"{', '.join(map(str, sorted(drawn)))}), the same rows for every run"
        if shared_rows and drawn
        else "validation rows drawn from the whole validation split by each run's seed (the same "
        "rows for every run of one seed)"
        if drawn
        else "the validation split's first rows"
    )
    lines += [
        "",
        "Modeled FLOPs: the training FLOPs of the depths each run drew, under the compute model. "
        "FLOP budget: for a compute-matched run, the budget it was planned to (it ends within "
        "one step below it; the share is realised / budget); other runs train a token budget. "
        "Modeled savings: 1 - the schedule's expected FLOPs / those of uniform 1..16 at the same "
        "token budget (a property of the schedule, not of one run's draws). Wall-clock: "
        f"training steps only (no evaluation or checkpoints); {against}. Compute of an auto "
        "switch's probes is not in these columns (switch_study.md has it). NLL: validation nats "
        "per token "
        f"over {', '.join(f'{t:,}' for t in eval_tokens)} tokens of {held_out} at serving depth "
        'K; mean over K = 1..16; "vs reference" is its relative difference to the reference '
        "run's (with seeds: of the same seed).",
    ]
    short = sorted({r["eval_sequences"] for r in rows if _scored_fewer(r)})
    if short:
        lines += [
            "",
            f"The validation split holds only {', '.join(map(str, short))} sequences, fewer than "
            "the evaluation asked for: all of it was scored.",
        ]
    earlier = sorted({r[ROW_FROM] for r in rows if ROW_FROM in r})
    for source in earlier:
        names = [r["name"] for r in rows if r.get(ROW_FROM) == source]
        lines += [
            "",
            f"Read from {source} (--rows-from: trained before, not in this directory): "
            + ", ".join(names)
            + ".",
        ]
    if missing:
        lines += ["", "Not finished yet (left out): " + ", ".join(missing) + "."]
    return "\n".join(lines) + "\n"


def _scored_fewer(row: dict[str, Any]) -> bool:
    """The run's evaluation scored all of a validation split smaller than it asked for."""
    return row.get("eval_sequences") is not None and (
        row["eval_sequences"] < row["eval_sequences_asked"]
    )


def write_text(path: Path, text: str) -> None:
    """Write through a temporary file so a reader never sees half a table."""
    write_text_atomic(path, text)
