"""Padded batches: every row of a left-padded batch decodes exactly as its prompt does alone, at a
fixed depth and under each exit rule (rows stopping at their own depths), and the padding is
really invisible: other pad ids, or more padding, change nothing."""

from __future__ import annotations

import pytest
import torch

from fixedfirst.model import KVCache, LoopedTransformer
from fixedfirst.runs.served import load_served
from fixedfirst.serve.adaptive import stream_adaptive
from fixedfirst.serve.batching import generate_batch, left_pad
from fixedfirst.serve.exit_rules import exit_rule
from fixedfirst.serve.modes import Adaptive, FixedDepth
from tests.conftest import tiny_model_config

LENGTHS = [5, 1, 9, 3]
# Thresholds at which the tiny random model's tokens stop at a mix of depths (asserted below).
RULES = [("kl", 2e-3), ("entropy", 1e-3), ("state", 0.3), ("argmax", 2)]


@pytest.fixture(scope="module")
def model() -> LoopedTransformer:
    torch.manual_seed(0)
    # float64, as in test_adaptive: exit decisions compare with a threshold, and the batch's
    # masked attention must not push a value across it through rounding alone.
    return LoopedTransformer(tiny_model_config(norm="sandwich", n_coda=2)).double().eval()


def prompts() -> list[list[int]]:
    generator = torch.Generator().manual_seed(7)
    return [torch.randint(0, 61, (n,), generator=generator).tolist() for n in LENGTHS]


def test_left_pad():
    ids, pad = left_pad([[4, 5], [6], [7, 8, 9]], pad_id=1)
    assert ids.tolist() == [[1, 4, 5], [1, 1, 6], [7, 8, 9]]
    assert pad.tolist() == [1, 2, 0]


@pytest.mark.parametrize("depth", [1, 4])
def test_padded_batch_at_fixed_depth_equals_each_alone(model, depth):
    rows = prompts()
    ids, pad = left_pad(rows)
    batch = model.generate(ids, 10, depth, pad=pad)[:, ids.shape[1] :]
    for b, row in enumerate(rows):
        alone = model.generate(torch.tensor([row]), 10, depth)[0, len(row) :]
        assert batch[b].tolist() == alone.tolist(), b


def test_padded_logits_equal_the_unpadded_forward(model):
    rows = prompts()
    ids, pad = left_pad(rows)
    cache = KVCache(pad)
    logits = model.decode_step(ids, 3, cache)
    for b, row in enumerate(rows):
        alone = model(torch.tensor([row]), 3)[0]
        torch.testing.assert_close(logits[b, int(pad[b]) :], alone, rtol=1e-10, atol=1e-10)


def test_padding_is_invisible(model):
    """Another pad id, or two more pad columns in every row, give the same tokens and logits:
    had any real position attended to a pad column, both would change them."""
    rows = prompts()
    ids, pad = left_pad(rows, pad_id=0)
    other, _ = left_pad(rows, pad_id=17)
    wider = torch.cat([torch.full((len(rows), 2), 33), ids], 1)
    reference = model.decode_step(ids, 4, KVCache(pad))
    repadded = model.decode_step(other, 4, KVCache(pad))
    widened = model.decode_step(wider, 4, KVCache(pad + 2))[:, 2:]
    for b in range(len(rows)):
        real = slice(int(pad[b]), None)  # a pad column's own output is garbage, never read
        torch.testing.assert_close(repadded[b, real], reference[b, real], rtol=0, atol=0)
        torch.testing.assert_close(widened[b, real], reference[b, real], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(("name", "threshold"), RULES)
def test_padded_batch_under_each_exit_rule_equals_each_alone(model, name, threshold):
    mode = Adaptive(exit_rule(name, threshold, 6))
    rows = prompts()
    ids, pad = left_pad(rows)
    steps = list(stream_adaptive(model, ids, 12, mode, pad=pad))
    tokens = torch.cat([t for t, _ in steps], 1)
    depths = torch.stack([d for _, d in steps], 1)
    assert len(set(depths.flatten().tolist())) > 1, "rows should stop at several depths"
    assert (depths.min(0).values != depths.max(0).values).any(), "rows should stop apart"
    for b, row in enumerate(rows):
        alone = list(stream_adaptive(model, torch.tensor([row]), 12, mode))
        assert tokens[b].tolist() == [int(t) for t, _ in alone], (name, b)
        assert depths[b].tolist() == [int(d) for _, d in alone], (name, b)


def test_generate_batch_matches_single_prompt_generation(text_run):
    from fixedfirst.serve.generation import generate_text

    served = load_served(text_run / "run")
    texts = ["the river", "a", "quartz lamp harbor"]
    for mode in (FixedDepth(3), Adaptive(exit_rule("kl", 1e-2, 5))):
        batch = generate_batch(served, texts, 20, mode)
        for text, done in zip(texts, batch, strict=True):
            alone = list(generate_text(served, text, 20, mode))
            assert done.tokens == [t.token for t in alone]
            assert done.depths == [t.depth for t in alone]
            assert done.text == "".join(t.text for t in alone)
