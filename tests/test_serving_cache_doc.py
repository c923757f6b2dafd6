"""docs/guides/serving-cache.md quotes the committed output of benchmarks/cache_strategies.py.

The benchmark wrote docs/figures/cache-strategies.json (its numbers) and
docs/figures/cache-strategies.md (its tables); the tables must be what the benchmark renders from
those numbers today, and the guide quotes them (tests/test_doc_quotes.py holds each quoted line
to them), so that a re-run that replaces the outputs fails until the guide is updated.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

from tests.test_doc_quotes import blocks

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guides" / "serving-cache.md"
TABLES = ROOT / "docs" / "figures" / "cache-strategies.md"
NUMBERS = ROOT / "docs" / "figures" / "cache-strategies.json"


def benchmark():
    spec = importlib.util.spec_from_file_location(
        "cache_strategies", ROOT / "benchmarks" / "cache_strategies.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_tables_are_rendered_from_the_committed_numbers():
    saved = json.loads(NUMBERS.read_text())
    args = argparse.Namespace(**saved["settings"])
    assert benchmark().markdown(saved["runs"], args) + "\n" == TABLES.read_text()


def test_the_guide_quotes_the_committed_tables():
    """Every line it quotes is checked against its source by test_doc_quotes; here, that the
    guide's quotes are of the benchmark's tables, none of something else."""
    quotes = [b for b in blocks(GUIDE.read_text()) if b[0] == "quote"]
    assert len(quotes) >= 2, "the guide quotes the benchmark's tables"
    for _, paths, lines in quotes:
        assert [ROOT / p for p in paths] == [TABLES], f"the guide quotes {paths}"
        assert lines, f"an empty quote from {paths}"


def test_the_targets_are_judged_from_the_numbers():
    """The verdict lines follow from the numbers: a share above 1/8 or an NLL 1% above the full
    cache's turns them to "no"."""
    module = benchmark()
    run = {
        "depths": [4, 16, 64],
        "strategies": ["full", "last", "bounded:4"],
        "bytes": {"full": [4.0, 16.0, 64.0], "last": [1.0] * 3, "bounded:4": [4.0] * 3},
        "nll": {"full": [2.0, 1.0, 1.0], "last": [2.5, 1.02, 1.0], "bounded:4": [9.0, 1.0, 1.009]},
    }
    lines = module.targets(run)
    assert "holds 0.062 of the full cache's bytes (at most 0.125: yes)" in lines[0]
    assert "K=16 +0.00%, K=64 +0.90% (within 1%: yes)" in lines[0]
    assert lines[1].endswith("S = 4.")
    run["bytes"]["bounded:4"] = [4.0, 16.0, 9.0]
    run["nll"]["bounded:4"][2] = 1.011
    lines = module.targets(run)
    assert "(at most 0.125: no)" in lines[0] and "(within 1%: no)" in lines[0]
    assert lines[1].endswith("none of those measured.")
