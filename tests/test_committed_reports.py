"""Every committed study report is what the study's own code makes of the results committed beside
it, to the byte.

COMMITTED names each study the docs quote: the file under docs/figures/ its report is made from
(what the study's command wrote as DIR/report.json, DIR/switch_study.json or, for the
language-model sweep, DIR/results.json) and the committed reports made from it. A study whose
results file is missing fails, so deleting the numbers a report was made from is caught too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fixedfirst.studies.ablation import report as ablation_report
from fixedfirst.studies.bios import report as bios_report
from fixedfirst.studies.chains import report as chains_report
from fixedfirst.studies.diagnose import report as diagnose_report
from fixedfirst.studies.finishing import report as finishing_report
from fixedfirst.studies.kit.depth_arms import BAND_CLAIMS, analyse_arms
from fixedfirst.studies.moe import report as moe_report
from fixedfirst.studies.report_files import numbers_json
from fixedfirst.studies.serving import report as serving_report
from fixedfirst.studies.serving.frontier_report import frontier_markdown
from fixedfirst.studies.sweep.claims import evaluate_claims
from fixedfirst.studies.sweep.factors import factor_table
from fixedfirst.studies.sweep.report import report_texts
from fixedfirst.studies.sweep.seed_table import seed_groups
from fixedfirst.studies.sweep.spec import load_sweep
from fixedfirst.studies.sweep.switch_study import (
    arms_of_document,
    document_markdown,
    study_document,
)
from tests.test_study_configs import script

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "docs/figures"
Remake = Callable[[dict[str, Any]], tuple[str, ...]]


@dataclass(frozen=True)
class Committed:
    study: str
    results: str
    """The file under docs/figures/ the reports are made from."""
    reports: tuple[str, ...]
    """The committed reports under docs/figures/, in the order `remake` returns them."""
    remake: Remake


def language_model(results: dict[str, Any]) -> tuple[str, ...]:
    """table.md and claims.md as the sweep writes them, the seeds' groups and the claims'
    verdicts computed again from the runs' rows; then scripts/gap_by_length.py's tables."""
    spec = load_sweep(ROOT / "configs/sweeps/lm-code-cpu.toml")
    rows = results["runs"]
    again = {
        **results,
        "groups": seed_groups(rows, spec.reference_group, spec.metric),
        "claims": evaluate_claims(spec.claims, rows, spec.metric, None),
    }
    texts = report_texts(spec, again, [])
    lengths = script("gap_by_length")
    params = 312_064  # d = 128, one core layer, 257 bytes (docs/studies/language-model.md)
    gaps = []
    for pair in ("ff-k2-s0.67-uniform", "ff-k4-s0.67-uniform"):
        gap_rows, missing = lengths.gap_rows(results, pair, "uniform", [1, 0.25, 0.0625])
        gaps.append(lengths.markdown(gap_rows, pair, "uniform", params, missing))
    return (texts["table.md"], texts["claims.md"], *gaps)


def gap_study(config: str) -> Remake:
    """A sweep with [[gaps]] (the factor study, its fresh-seed rerun): table.md, claims.md and
    factors.md as the sweep writes them, its groups, claims and gap table computed again from
    the runs' rows (the runs not finished yet listed as the sweep lists them)."""

    def remake(results: dict[str, Any]) -> tuple[str, ...]:
        spec = load_sweep(ROOT / config)
        rows = results["runs"]
        again = {
            **results,
            "groups": seed_groups(rows, spec.reference_group, spec.metric),
            "claims": evaluate_claims(spec.claims, rows, spec.metric, None),
            "factors": factor_table(rows, spec.gaps, spec.factors),
        }
        finished = {r["name"] for r in rows}
        texts = report_texts(spec, again, [p.name for p in spec.runs if p.name not in finished])
        return texts["table.md"], texts["claims.md"], texts["factors.md"]

    return remake


def report(render: Callable[[dict[str, Any]], str]) -> Remake:
    return lambda numbers: (render(numbers),)


def switch_study(document: dict[str, Any]) -> tuple[str, ...]:
    """switch_study.md from the arms, and switch_study.json itself: its means, spreads and
    verdicts are what the arms' per-seed values give."""
    arms = arms_of_document(document)
    again = study_document(arms, document["metric"], document["metric_name"])
    return document_markdown(document), numbers_json(again) + "\n"


COMMITTED = (
    Committed(
        "language model",
        "lm-code-results.json",
        (
            "lm-code-table.md",
            "lm-code-claims.md",
            "lm-code-gap-by-length.md",
            "lm-code-gap-by-length-k4.md",
        ),
        language_model,
    ),
    Committed(
        "language model, factors",
        "lm-factors-results.json",
        ("lm-factors-table.md", "lm-factors-claims.md", "lm-factors-factors.md"),
        gap_study("configs/sweeps/lm-factors.toml"),
    ),
    Committed(
        "language model, fresh seeds",
        "lm-fresh-results.json",
        ("lm-fresh-table.md", "lm-fresh-claims.md", "lm-fresh-factors.md"),
        gap_study("configs/sweeps/lm-fresh.toml"),
    ),
    Committed(
        "bios demo", "bios-report.json", ("bios-report.md",), report(bios_report.report_markdown)
    ),
    Committed(
        "bios loop",
        "bios-loop-report.json",
        ("bios-loop-report.md",),
        report(bios_report.report_markdown),
    ),
    Committed(
        "bios loop, fresh seeds",
        "bios-loop-fresh-report.json",
        ("bios-loop-fresh-report.md",),
        report(bios_report.report_markdown),
    ),
    Committed(
        "chains", "chains-report.json", ("chains-report.md",), report(chains_report.report_markdown)
    ),
    Committed(
        "chains, fresh seeds",
        "chains-fresh-report.json",
        ("chains-fresh-report.md",),
        report(chains_report.report_markdown),
    ),
    Committed(
        "figure 4",
        "figure4-report.json",
        ("figure4-report.md",),
        report(diagnose_report.report_markdown),
    ),
    Committed(
        "auto-switch, fortunes",
        "auto-switch-fortunes.json",
        ("auto-switch-fortunes.md", "auto-switch-fortunes.json"),
        switch_study,
    ),
    Committed(
        "auto-switch, chains",
        "auto-switch-chains.json",
        ("auto-switch-chains.md", "auto-switch-chains.json"),
        switch_study,
    ),
    Committed(
        "ablation, chains",
        "ablation-chains-report.json",
        ("ablation-chains-report.md",),
        report(ablation_report.report_markdown),
    ),
    Committed(
        "ablation, bios",
        "ablation-bios-report.json",
        ("ablation-bios-report.md",),
        report(ablation_report.report_markdown),
    ),
    Committed(
        "serving economics",
        "serving-economics-report.json",
        ("serving-economics-report.md",),
        report(serving_report.report_markdown),
    ),
    Committed(
        "looped mixture-of-experts",
        "moe/results.json",
        ("moe/report.md",),
        report(moe_report.report_markdown),
    ),
    Committed(
        "finishing, dense",
        "finishing-dense/results.json",
        ("finishing-dense/report.md",),
        report(finishing_report.report_markdown),
    ),
    Committed(
        "finishing, looped mixture-of-experts",
        "finishing-moe/results.json",
        ("finishing-moe/report.md",),
        report(finishing_report.report_markdown),
    ),
    Committed(
        "exit frontier, chains",
        "frontier-chains.json",
        ("frontier-chains.md",),
        report(frontier_markdown),
    ),
)


@pytest.mark.parametrize("committed", COMMITTED, ids=lambda c: c.study)
def test_committed_reports_are_remade_from_the_results_beside_them(committed):
    path = FIGURES / committed.results
    assert path.exists(), f"{committed.study}: docs/figures/{committed.results} is not committed"
    results = json.loads(path.read_text())
    remade = committed.remake(results)
    assert len(remade) == len(committed.reports)
    for name, text in zip(committed.reports, remade, strict=True):
        assert text == (FIGURES / name).read_text(), (
            f"docs/figures/{name} is not what the code makes of docs/figures/{committed.results}"
        )


def test_numbers_json_reads_back_as_written_with_plain_containers_on_one_line():
    value = {
        "runs": {"a": {"scores": {"1": 0.1, "16": 1 / 3}, "tags": []}, "b": {}},
        "recall": [{"depth": 1, "bits": 2.5e-17, "seed": None, "ok": True}],
        "depths": [1, 2, 64],
        "label": "x \u00b1 y",
    }
    text = numbers_json(value)
    assert json.loads(text) == value and json.loads(text)["runs"]["a"]["scores"]["16"] == 1 / 3
    assert text.splitlines() == [
        "{",
        '  "runs": {',
        '    "a": {',
        '      "scores": {"1": 0.1, "16": 0.3333333333333333},',
        '      "tags": []',
        "    },",
        '    "b": {}',
        "  },",
        '  "recall": [',
        '    {"depth": 1, "bits": 2.5e-17, "seed": null, "ok": true}',
        "  ],",
        '  "depths": [1, 2, 64],',
        '  "label": "x \\u00b1 y"',
        "}",
    ]
    with pytest.raises(TypeError, match="keys must be strings"):
        numbers_json({"by_depth": {4: 1.0}})


@pytest.mark.parametrize(
    "results", ["moe/results.json", "finishing-dense/results.json", "finishing-moe/results.json"]
)
def test_a_committed_analysis_is_what_its_runs_give_now(results):
    """A results file's stored `analysis` block is the analysis of its own runs by today's
    rules (the reports recompute it, but a reader of the JSON reads the block): a change to the
    rules (e.g. which exploratory differences count) is written back, not left stale."""
    stored = json.loads((FIGURES / results).read_text())
    e = stored["experiment"]
    primary = [BAND_CLAIMS.read(raw) for raw in e["primary"]]
    analysis = analyse_arms(
        stored["runs"], e["depths"], stored["reference"], e["compare_depths"], primary
    )
    assert json.loads(json.dumps(analysis)) == stored["analysis"]
