"""scripts/switch_flops.py: where the bios loop's fixed-first runs switch, in FLOPs, remade from
the committed reports, and a report whose runs its preset does not rebuild refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_study_configs import script

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ["docs/figures/bios-loop-report.json", "docs/figures/bios-loop-fresh-report.json"]
COMMITTED = "docs/figures/bios-loop-switch-flops.md"


def test_the_committed_table_is_what_the_script_makes_of_the_reports():
    made = script("switch_flops").document(REPORTS, COMMITTED)
    assert made == (ROOT / COMMITTED).read_text()


def test_the_share_is_the_fixed_stage_s_flops_over_the_budget():
    """An independent count: K0 = 2 at 0.67 trains `switch` steps at depth 2, each of 64 x 52
    tokens at 3 x the forward FLOPs of a token (2 per weight: attention 4 d^2 and a SwiGLU 3 d h
    per layer, two core layers per pass, the concat adapter's W_s per pass and W_e once, the
    2767-word head; 4 T d of attention scores), less the first pass's state gradient."""
    report = json.loads((ROOT / REPORTS[1]).read_text())
    rows = script("switch_flops").switch_rows(report)
    (row,) = [r for r in rows if r["run"] == "fixed-first-2-0.67-seed102"]
    d, h, t, vocab = 128, 384, 52, 2767
    layer = 2 * (4 * d * d + 3 * d * h) + 4 * t * d
    adapter = 2 * d * d
    forward = adapter + 2 * (adapter + 2 * layer) + 2 * d * vocab
    per_token = 3 * forward - adapter
    assert row["switch"] == 438 and row["steps"] == 653
    assert row["share"] == pytest.approx(438 * 64 * 52 * per_token / 3.2e13, rel=1e-12)


def test_a_report_the_preset_does_not_rebuild_is_refused():
    report = json.loads((ROOT / REPORTS[0]).read_text())
    report["runs"]["fixed-first-2-0.67-seed1"]["flops"] *= 1.001
    with pytest.raises(SystemExit, match="fixed-first-2-0.67-seed1: the preset plans"):
        script("switch_flops").switch_rows(report)
