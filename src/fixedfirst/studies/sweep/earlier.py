"""Rows of runs trained before, read from an earlier results.json of the same sweep.

A long sweep is trained in parts, sometimes on machines whose run directories do not survive;
its results.json keeps every finished run's row (scores per depth and held-out block, loss
curve, cost). `--rows-from FILE` lets a later invocation report those runs beside the ones in
DIR without training them again. A row stands in for a run only if it is the run the sweep
plans now: the same name, seed, schedule, steps, tokens and modeled FLOPs (which also pin the
model's shape), scored on the same held-out rows in the same precision. Settings that change
none of these (the learning rate, say) cannot be checked from a row; a run finished in DIR
always takes precedence over a row.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fixedfirst.compute.run_cost import run_plan
from fixedfirst.errors import UserError
from fixedfirst.studies.kit.runs import PlannedRun
from fixedfirst.studies.sweep.results import RESULTS_FORMAT, ROW_FROM
from fixedfirst.studies.sweep.settings import SweepSettings


def read_earlier_rows(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a sweep's results.json, refused with a one-line reason if it is not one."""
    path = Path(path)
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"--rows-from {path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(f"--rows-from {path}: not a readable JSON file ({err})") from None
    if not isinstance(document, dict) or document.get("format") != RESULTS_FORMAT:
        raise UserError(
            f"--rows-from {path}: not a sweep's results.json (its format is not {RESULTS_FORMAT!r})"
        )
    rows = document.get("runs")
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "name" in r for r in rows):
        raise UserError(f"--rows-from {path}: its 'runs' is not a list of rows")
    return rows


def fingerprint_mismatch(row: dict[str, Any], planned: PlannedRun) -> str | None:
    """Why `row` is not a result of `planned` as the sweep plans it now, or None if it is."""
    plan = run_plan(planned.config)
    expected = {
        "seed": planned.config.train.seed,
        "schedule_config": planned.config.to_dict()["schedule"],
        "steps": plan.total_steps,
        "tokens": plan.tokens,
        "modeled_flops": plan.flops,
    }
    for key, value in expected.items():
        if row.get(key) != value:
            return f"its {key} is {row.get(key)!r}, the sweep plans {value!r}"
    return None


def adopt_rows(
    earlier: list[dict[str, Any]],
    runs: list[PlannedRun],
    settings: SweepSettings,
    finished: list[dict[str, Any]],
    source: str,
) -> list[dict[str, Any]]:
    """The earlier rows that stand in for runs of `runs` not finished in DIR (`finished` are
    the rows of those that are), each marked with `source`; a row whose run the sweep plans
    differently, or that scored other held-out rows, is refused with the reason."""
    if settings.rows != "shared":
        raise UserError(
            f"--rows-from {source}: rows from another directory pair with DIR's runs only on "
            'one shared held-out set: set [sweep] heldout = "shared" (and heldout_rows)'
        )
    planned = {p.name: p for p in runs}
    done = {r["name"] for r in finished}
    scored = {r["validation_sha256"] for r in finished}
    adopted = []
    for row in earlier:
        name = row["name"]
        if name in done or name not in planned:
            continue
        why = fingerprint_mismatch(row, planned[name]) or heldout_mismatch(row, settings, scored)
        if why is not None:
            raise UserError(
                f"--rows-from {source}: row {name!r} is not this sweep's run: {why}; "
                "drop --rows-from, or train the run here"
            )
        adopted.append({**row, ROW_FROM: source})
        scored.add(row["validation_sha256"])
    return adopted


def heldout_mismatch(row: dict[str, Any], settings: SweepSettings, scored: set[str]) -> str | None:
    """Why `row` was not scored as the sweep scores (its shared set, precision, and the rows
    every other run scored: `scored`, their checksums), or None."""
    if settings.eval_precision == "fp32" and row.get("eval_precision") != "fp32":
        return f"it was scored in {row.get('eval_precision')}, the sweep scores in fp32"
    if row.get("eval_sequences_asked") != settings.heldout_rows:
        asked = row.get("eval_sequences_asked")
        return f"it asked for {asked} held-out rows, the sweep for {settings.heldout_rows}"
    blocks = (row.get("heldout_blocks") or {}).get("mean")
    if not isinstance(blocks, list) or len(blocks) != settings.heldout_blocks:
        return f"it carries no mean NLL for each of the set's {settings.heldout_blocks} blocks"
    if scored and row.get("validation_sha256") not in scored:
        return "it scored other held-out rows than the other runs (validation_sha256 differs)"
    return None
