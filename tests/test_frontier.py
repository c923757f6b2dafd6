"""The exit frontier of one model (`serve/frontier.py`, `serve/pareto.py`, `fixedfirst frontier`):
every point's depth and quality against a slow reference that decodes each row alone, token by
token (tests/frontier_reference.py), its reading (Pareto front, matched quality) against points
worked out by hand, and the command end to end on a trained run."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from fixedfirst.cli.main import main
from fixedfirst.data.source import Batch
from fixedfirst.model import LoopedTransformer
from fixedfirst.model.loss import IGNORE_INDEX
from fixedfirst.serve.frontier import NLL, NextTokenNLL, measure_quality, servings
from fixedfirst.serve.pareto import QualityMeasure, best_rule, matched_quality, pareto_front
from fixedfirst.studies.serving.frontier_report import frontier_markdown
from fixedfirst.tasks.chains.accuracy import ExitAccuracy
from fixedfirst.tasks.chains.bands import bands_of
from fixedfirst.tasks.chains.program import ChainsOptions
from fixedfirst.tasks.chains.source import chains_tokenizer, evaluation_set
from tests.conftest import tiny_model_config
from tests.frontier_reference import slow_point

EXITS = {"kl": [1e-3], "entropy": [1e-3, 1e-4], "state": [0.3], "argmax": [2, 3]}
"""Thresholds at which the models below stop rows at different depths within a batch."""


def lively(seed: int, **overrides) -> LoopedTransformer:
    """A float64 tiny model whose core weights are scaled up, so that its recurrence keeps
    moving for a few iterations and the rules stop different tokens at different depths."""
    torch.manual_seed(seed)
    model = LoopedTransformer(tiny_model_config(**overrides)).double().eval()
    with torch.no_grad():
        for p in model.core.parameters():
            p.mul_(5)
    return model


def rule_and_threshold(mode) -> tuple[str | None, float]:
    rule = getattr(mode, "rule", None)
    return (None, 0.0) if rule is None else (rule.name, rule.threshold)


def test_every_point_of_a_text_frontier_is_the_slow_reference():
    model = lively(0, injection="add", state_init="zeros")
    inputs = torch.randint(0, 61, (3, 11), generator=torch.Generator().manual_seed(1))
    targets = torch.cat([inputs[:, 1:], torch.full((3, 1), IGNORE_INDEX)], 1)
    targets[1, :3] = IGNORE_INDEX  # unscored positions count neither in NLL nor in depth
    batches = [Batch(inputs[:2], targets[:2]), Batch(inputs[2:], targets[2:])]
    modes = servings(6, [1, 3, 6], EXITS)
    scored = measure_quality(model, NextTokenNLL(batches), modes)
    scored_mask = targets != IGNORE_INDEX
    varied = set()
    for mode, point in zip(modes, scored, strict=True):
        rule, threshold = rule_and_threshold(mode)
        logits, depths = slow_point(model, inputs, mode.max_depth, rule, threshold)
        nll = F.cross_entropy(logits[scored_mask], targets[scored_mask])
        assert point.mean_depth == pytest.approx(float(depths[scored_mask].double().mean()), 1e-12)
        assert point.quality == pytest.approx(float(nll), abs=1e-9), mode
        assert point.details["tokens"] == int(scored_mask.sum())
        if rule is not None and any(len(set(d.tolist())) > 1 for d in depths[:2].t()):
            varied.add(rule)  # the two rows of the first batch stopped apart at some position
    assert varied == set(EXITS), "every rule must stop some rows apart for the test to hold"


def test_every_point_of_a_chains_frontier_is_the_slow_reference():
    options = ChainsOptions(statements=12, values=5, max_ops=3, eval_ops=6)
    vocab = chains_tokenizer(options).vocab_size
    model = lively(2, vocab_size=vocab, max_seq_len=13)  # concat injection, drawn initial state
    evaluation = evaluation_set(options, 5, 5)
    scorer = ExitAccuracy(evaluation, options, batch_size=3)
    modes = servings(6, [1, 2, 6], {"entropy": [1e-3], "argmax": [2], "state": [0.3]})
    scored = measure_quality(model, scorer, modes)
    inputs, targets = evaluation.batch.inputs, evaluation.batch.targets
    positions = evaluation.positions
    for mode, point in zip(modes, scored, strict=True):
        rule, threshold = rule_and_threshold(mode)
        logits, depths = slow_point(model, inputs, mode.max_depth, rule, threshold)
        right = logits.argmax(-1).gather(1, positions) == targets.gather(1, positions)
        per_sequence = right[:, : options.max_ops + 1].double().mean(1)
        assert point.quality == pytest.approx(float(per_sequence.mean()), abs=1e-12), mode
        scored_mask = targets != IGNORE_INDEX
        assert point.mean_depth == pytest.approx(float(depths[scored_mask].double().mean()))
        at = depths.gather(1, positions).double()
        for band in bands_of(options):
            cell = point.details["bands"][band.label]
            span = slice(band.low, band.high + 1)
            assert cell["accuracy"] == pytest.approx(float(right[:, span].double().mean()))
            assert cell["mean_depth"] == pytest.approx(float(at[:, span].mean()))


def point(rule, depth, quality, gflops=None, threshold=None):
    return {
        "rule": rule,
        "threshold": threshold,
        "mean_depth": depth,
        "quality": quality,
        "gflops": depth + 1 if gflops is None else gflops,
    }


POINTS = [
    point(None, 1, 3.00),
    point(None, 2, 2.50),
    point(None, 4, 2.008),
    point(None, 8, 2.00),
    point(None, 16, 2.001),
    point("kl", 2.5, 2.009, gflops=5.0, threshold=0.01),  # within 0.5% of 2.00 at 2.5 iterations
    point("kl", 3.5, 2.004, gflops=6.0, threshold=0.001),
    point("state", 3.0, 2.2, threshold=0.1),  # never within 0.5%
    point("argmax", 5.0, 2.005, gflops=4.5, threshold=2),
]


def test_pareto_front_and_matched_quality_worked_by_hand():
    assert pareto_front(POINTS, NLL) == [0, 1, 5, 6, 3]
    m = matched_quality(POINTS, NLL)
    assert m["best_fixed"] == 3 and m["target"] == pytest.approx(2.01)
    assert m["meeting"] == [2, 3, 4, 5, 6, 8]
    it = m["by"]["iterations"]
    assert (it["point"], it["cheapest_fixed"]) == (5, 2)
    assert it["saved"] == pytest.approx(1 - 2.5 / 8)
    assert it["saved_by_exit"] == pytest.approx(1 - 2.5 / 4)
    assert it["rules"]["state"] == {
        "point": None,
        "saved": pytest.approx(1 - 4 / 8),  # falls back on fixed K=4
        "saved_by_exit": 0.0,
    }
    assert it["rules"]["argmax"]["point"] == 8 and it["rules"]["argmax"]["saved_by_exit"] == 0
    flops = m["by"]["flops"]  # fixed K=4 costs 5 GFLOPs, argmax 4.5, KL 5.0 at best
    assert (flops["point"], flops["cheapest_fixed"]) == (8, 2)
    assert flops["saved"] == pytest.approx(1 - 4.5 / 9)
    assert best_rule(m) == "kl" and best_rule(m, "flops") == "argmax"


def test_accuracy_matches_within_points_and_prefers_the_shallowest_best_depth():
    accuracy = QualityMeasure("accuracy", "share", "higher", 0.01, relative=False)
    points = [point(None, 2, 0.90), point(None, 4, 0.995), point(None, 8, 0.995)]
    points.append(point("kl", 3.0, 0.986, threshold=0.01))
    points.append(point("kl", 3.5, 0.9851, threshold=0.001))
    m = matched_quality(points, accuracy)
    assert m["best_fixed"] == 1 and m["target"] == pytest.approx(0.985)
    assert m["by"]["iterations"]["point"] == 3
    assert m["by"]["iterations"]["saved"] == pytest.approx(0.25)


FRONTIER = [
    "--max-depth",
    "4",
    "--exit",
    "kl=0.01,0.001",
    "--exit",
    "argmax=2",
    "--rows",
    "4",
    "--speed-rows",
    "2",
    "--speed-tokens",
    "4",
    "--repeats",
    "1",
    "--quiet",
]


def test_the_command_writes_the_frontier_and_its_report_from_it(text_run, tmp_path, capsys):
    out = tmp_path / "frontier"
    with pytest.raises(SystemExit) as e:
        main(["frontier", str(text_run / "run"), "--out", str(out), *FRONTIER])
    assert e.value.code == 0
    document = json.loads((out / "frontier.json").read_text())
    assert (document["format"], document["version"]) == ("fixedfirst-frontier", 1)
    servings_ = [p["serving"] for p in document["points"]]
    assert servings_[:4] == ["fixed K=1", "fixed K=2", "fixed K=3", "fixed K=4"]
    assert [(p["rule"], p["threshold"]) for p in document["points"][4:]] == [
        ("kl", 0.01),
        ("kl", 0.001),
        ("argmax", 2),
    ]
    assert all(p["tokens_per_s"] > 0 for p in document["points"])
    assert document["matched"] == json.loads(json.dumps(matched_quality(document["points"], NLL)))
    assert (out / "frontier.md").read_text() == frontier_markdown(document)
    assert (out / "frontier.png").stat().st_size > 10_000
    said = capsys.readouterr().out
    assert "best fixed depth" in said and f"wrote {out / 'frontier.md'}" in said
