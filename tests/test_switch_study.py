"""The sweep as the auto-switch study: seeds, groups, a task metric, the study's table, verdicts
and figure; and the study's verdict arithmetic on rows whose answer is known."""

from __future__ import annotations

import json

import pytest

from fixedfirst.studies.sweep import load_sweep
from fixedfirst.studies.sweep.switch_study import (
    arms_of,
    document_markdown,
    study_document,
    study_markdown,
    verdicts,
)
from tests.report_checks import assert_report_remade
from tests.test_sweep import BASE, PNG_MAGIC, corpus, run_cli  # noqa: F401 (a fixture)

STUDY = """
[sweep]
seeds = [0, 1]
switch_study = true
eval_batches = 1

[[runs]]
name = "half"
schedule.switch = 0.5

[[runs]]
name = "auto"
schedule.switch = "auto"
switch.rule = "plateau"
switch.window = 0.5
switch.every = 1
switch.threshold = 100.0
"""


def test_seeded_study_sweep_end_to_end(tmp_path, capsys, corpus):  # noqa: F811
    sweep = tmp_path / "study.toml"
    sweep.write_text(BASE.format(data=corpus) + STUDY)
    spec = load_sweep(sweep)
    names = ["half-seed0", "half-seed1", "auto-seed0", "auto-seed1"]
    assert [r.name for r in spec.runs] == names
    assert [r.config.train.seed for r in spec.runs] == [0, 1, 0, 1]
    assert spec.groups["auto-seed1"] == "auto" and spec.reference is None
    code, stdout, _ = run_cli(capsys, "sweep", sweep, "--out", tmp_path / "out")
    assert code == 0, stdout
    out = tmp_path / "out"
    rows = json.loads((out / "results.json").read_text())["runs"]
    auto = [r for r in rows if r["group"] == "auto"]
    # A threshold no fall reaches: the rule fires at the floor, step 5 of 10.
    assert [(r["switch"]["step"], r["switch"]["reason"]) for r in auto] == [(5, "rule")] * 2
    assert all(r["compute"] == r["modeled_flops"] for r in rows)  # plateau probes nothing
    study = json.loads((out / "switch_study.json").read_text())
    assert [(a["group"], a["seeds"]) for a in study["arms"]] == [("half", [0, 1]), ("auto", [0, 1])]
    (verdict,) = study["verdicts"]
    assert verdict["rule"] == "plateau" and verdict["best_fixed"] == "switch 0.5"
    # Switching at the same step as the fixed half, the auto runs are the fixed runs.
    assert verdict["shortfall"] == 0.0 and verdict["compute_ratio"] == 1.0 and verdict["met"]
    text = (out / "switch_study.md").read_text()
    assert "| 2 | **switch 0.5** (best fixed) | 2 |" in text
    assert "K0 = 2, plateau: 0.0000 better" in text and "**meets the target**" in text
    assert (out / "switch_study.png").read_bytes()[:8] == PNG_MAGIC
    assert "| **" not in (out / "table.md").read_text()  # no reference run is named
    # switch_study.md is made from switch_study.json alone, which holds the arms as measured.
    arms = arms_of(rows, "nll")
    assert study_document(arms, "nll", "mean serving NLL") == study
    from_rows = study_markdown(arms, "nll", "mean serving NLL")
    assert_report_remade(out, document_markdown, from_rows, tmp_path, stem="switch_study")


def row(group, k0, switch, seed, nll, compute, fraction, rule=None, probes=0.0):
    return {
        "group": group,
        "kind": "fixed-first",
        "seed": seed,
        "schedule_config": {"k0": k0, "switch": "auto" if rule else switch},
        "switch": {"fraction": fraction, "rule": rule, "reason": "rule" if rule else None},
        "nll_by_depth": {str(d): nll for d in range(1, 17)},
        "compute": compute + probes,
        "modeled_flops": compute,
        "probe_flops": probes,
    }


def test_verdicts_measure_misses_against_the_best_fixed_fraction():
    rows = [
        row("early", 2, 0.5, 0, 2.30, 10.0, 0.5),
        row("early", 2, 0.5, 1, 2.32, 10.0, 0.5),
        row("late", 2, 0.9, 0, 2.40, 6.0, 0.9),
        row("late", 2, 0.9, 1, 2.40, 6.0, 0.9),
        # within the best's spread (0.02) and cheaper: met
        row("close", 2, None, 0, 2.32, 8.0, 0.6, "plateau"),
        row("close", 2, None, 1, 2.33, 8.0, 0.62, "plateau"),
        # 0.05 worse than the best's mean (0.03 beyond its spread) and 10% dearer
        row("far", 2, None, 0, 2.36, 10.0, 0.5, "depth-gap", probes=1.0),
        row("far", 2, None, 1, 2.36, 10.0, 0.5, "depth-gap", probes=1.0),
    ]
    arms = arms_of(rows, "nll")
    assert [a.group for a in arms] == ["early", "late", "close", "far"]
    close, far = verdicts(arms, lower_is_better=True)
    assert close.best_fixed == "switch 0.5" and close.met
    assert close.shortfall == pytest.approx(0.015) and close.spread == pytest.approx(0.02)
    assert not far.met
    assert far.quality_miss == pytest.approx(0.03) and far.compute_miss == pytest.approx(0.1)
    text = study_markdown(arms, "nll", "mean serving NLL")
    assert "misses by 0.0300 beyond the spread and 10.0% more compute" in text
    assert "0.600, 0.620" in text
    # For a score, higher is better: the same numbers make "late" the best.
    assert verdicts(arms, lower_is_better=False)[0].best_fixed == "switch 0.9"


CHAINS = """
[base.model]
vocab_size = 13
d_model = 32
n_heads = 4
n_prelude = 1
n_core = 1
n_coda = 1
max_seq_len = 21
injection = "add"
state_init = "zeros"

[base.schedule]
kind = "fixed-first"
k0 = 2

[base.train]
tokens = 1680
seq_len = 21
batch_size = 8
log_every = 1

[base.data]
kind = "chains"

[base.data.chains]
statements = 20
values = 8
max_ops = 4
eval_ops = 12

[base.eval]
depths = [1, 4]
batches = 1

[sweep]
metric = "task"
switch_study = true

[[runs]]
name = "fixed"

[[runs]]
name = "auto"
schedule.switch = "auto"
switch.rule = "depth-gap"
switch.every = 1
switch.window = 0.5
switch.batches = 1
"""


def test_a_task_metric_study_scores_every_run_by_serving_depth(tmp_path, capsys):
    sweep = tmp_path / "chains.toml"
    sweep.write_text(CHAINS)
    code, stdout, _ = run_cli(capsys, "sweep", sweep, "--out", tmp_path / "out", "--quiet")
    assert code == 0, stdout
    out = tmp_path / "out"
    rows = json.loads((out / "results.json").read_text())["runs"]
    for row in rows:
        assert set(row["task_scores"]) == {str(d) for d in [*range(1, 17), 32, 64]}
        assert all(0.0 <= v <= 1.0 for v in row["task_scores"].values())
        assert "accuracy at difficulty" in row["task_score_name"]
        assert (out / "runs" / row["name"] / "eval-task-step-0000010.json").is_file()
    auto = rows[1]
    assert auto["probe_flops"] > 0 and auto["compute"] > auto["modeled_flops"]
    study = json.loads((out / "switch_study.json").read_text())
    assert study["lower_is_better"] is False and study["metric_name"].startswith("accuracy")
    assert "| accuracy at difficulty" in (out / "switch_study.md").read_text()
    assert (out / "figure3.png").read_bytes()[:8] == PNG_MAGIC  # the first fixed-first run
