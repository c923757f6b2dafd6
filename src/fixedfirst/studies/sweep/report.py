"""A sweep's results from its rows, and its report: table.md, claims.md, the figures and, for a
switch study, its table, numbers and figure.

Everything here reads numbers already measured (the rows, from each run's summary and cached
evaluations); nothing trains or evaluates, so the report of a finished sweep is rewritten in
seconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fixedfirst.studies.kit.report_files import write_numbers_and_report
from fixedfirst.studies.kit.runs import run_directory
from fixedfirst.studies.sweep.claims import claims_markdown, evaluate_claims
from fixedfirst.studies.sweep.depth_figure import plot_nll_by_depth
from fixedfirst.studies.sweep.factors import factor_table, factors_markdown
from fixedfirst.studies.sweep.figure3 import plot_figure3
from fixedfirst.studies.sweep.results import (
    ROW_FROM,
    compare_to_reference,
    results_document,
    table_markdown,
    write_text,
)
from fixedfirst.studies.sweep.seed_table import seed_groups, seed_table_markdown
from fixedfirst.studies.sweep.settings import SweepSettings
from fixedfirst.studies.sweep.spec import SweepSpec
from fixedfirst.studies.sweep.switch_figure import plot_switch_study
from fixedfirst.studies.sweep.switch_study import arms_of, document_markdown, study_document


def sweep_results(spec: SweepSpec, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """results.json from the rows: each run compared with the reference, and with [sweep] seeds,
    claims or gaps, the groups over seeds, the claims' verdicts, the factor table."""
    same_seed = spec.seeds is not None
    compare_to_reference(rows, spec.reference, same_seed)
    document = results_document(rows, spec.reference, spec.path, sorted(spec.settings.eval_depths))
    if spec.seeds is not None:
        document["groups"] = seed_groups(rows, spec.reference_group, spec.metric)
    if spec.claims:
        score_name = _score_name(spec, rows)
        document["claims"] = evaluate_claims(spec.claims, rows, spec.metric, score_name)
    if spec.gaps:
        document["factors"] = factor_table(rows, spec.gaps, spec.factors)
    document["heldout"] = heldout_record(spec.settings, rows)
    return document


def _score_name(spec: SweepSpec, rows: list[dict[str, Any]]) -> str | None:
    return rows[0].get("task_score_name") if spec.metric == "task" else None


def report_texts(spec: SweepSpec, results: dict[str, Any], missing: list[str]) -> dict[str, str]:
    """From results.json's document (`sweep_results`) and the sweep file alone: table.md and,
    with claims, claims.md, with gaps, factors.md, by file name."""
    rows = results["runs"]
    shared = spec.settings.rows == "shared"
    table = table_markdown(rows, spec.reference, missing, spec.seeds is not None, shared)
    if spec.seeds is not None:
        table += "\n## Over seeds\n\n" + seed_table_markdown(
            results["groups"],
            spec.reference_group,
            spec.metric,
            _score_name(spec, rows),
            shared_rows=shared,
        )
    texts = {"table.md": table}
    if spec.claims:
        texts["claims.md"] = claims_markdown(results["claims"], spec.metric)
    if spec.gaps:
        texts["factors.md"] = factors_markdown(results["factors"])
    return texts


def write_report(
    spec: SweepSpec, out: Path, results: dict[str, Any], missing: list[str]
) -> list[Path]:
    """From results.json's document (`sweep_results`, written beside): the `report_texts`,
    nll_by_depth.png, (when its run finished) figure3.png and, for a switch study,
    switch_study.json/.md/.png (`write_study`); the files."""
    rows = results["runs"]
    same_seed = spec.seeds is not None
    score_name = _score_name(spec, rows)
    files: list[Path] = []
    for name, text in report_texts(spec, results, missing).items():
        write_text(out / name, text)
        files.append(out / name)
    if same_seed:
        figure = plot_nll_by_depth(rows, spec.reference_group, out / "nll_by_depth.png", True)
    else:
        figure = plot_nll_by_depth(rows, spec.reference, out / "nll_by_depth.png")
    files.append(figure)
    # Drawn from the run's metrics, so not for a row read --rows-from (its run is elsewhere).
    figure3 = spec.figure3
    if figure3 is not None and any(r["name"] == figure3 and ROW_FROM not in r for r in rows):
        figure3_run = run_directory(out, figure3).path
        files.append(plot_figure3(figure3_run, out / "figure3.png"))
    if spec.switch_study:
        files += write_study(rows, spec.metric, score_name or "mean serving NLL", out)
    return files


def heldout_record(settings: SweepSettings, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """results.json's `heldout`: which rows the final evaluations scored, and in what precision;
    for a shared set its one checksum (refused if the runs' rows differ: they must be paired)."""
    record: dict[str, Any] = {
        "rows": settings.rows,
        "count": settings.heldout_rows,
        "precision": settings.eval_precision,
    }
    if settings.rows == "shared":
        sums = {r["validation_sha256"] for r in rows}
        if len(sums) != 1:
            raise ValueError(f"the runs scored {len(sums)} different held-out sets, not one")
        record.update(seed=settings.heldout_seed, blocks=settings.heldout_blocks, sha256=sums.pop())
    return record


def write_study(rows: list[dict[str, Any]], metric: str, metric_name: str, out: Path) -> list[Path]:
    """switch_study.json, switch_study.md made from it, and switch_study.png in `out`."""
    arms = arms_of(rows, metric)
    if not arms:
        return []
    document = study_document(arms, metric, metric_name)
    write_numbers_and_report(out, document, document_markdown, stem="switch_study")
    figure = plot_switch_study(arms, metric, metric_name, out / "switch_study.png")
    return [out / "switch_study.md", out / "switch_study.json", figure]
