"""Depth-speculative decoding equals plain greedy decoding at the serving depth, token for token,
for several seeds, depths and draft settings, alone and in padded batches; after rejected drafts
the cache holds exactly what plain decoding's holds; the verifier's reuse of the draft's
iterations changes nothing but the work done."""

from __future__ import annotations

import pytest
import torch

from fixedfirst.errors import UserError
from fixedfirst.model import KVCache, LoopedTransformer
from fixedfirst.serve.batching import left_pad
from fixedfirst.serve.modes import Speculated
from fixedfirst.serve.speculative import SpeculationStats, stream_speculative
from tests.conftest import tiny_model_config


def build(seed: int, **overrides) -> LoopedTransformer:
    torch.manual_seed(seed)
    # float64: the verifier runs the drafted tokens as one chunk, plain decoding one at a time;
    # in double precision their argmaxes cannot differ through rounding alone.
    return LoopedTransformer(tiny_model_config(**overrides)).double().eval()


def speculative(model, prompt, n, depth, draft_depth, draft_tokens, **kwargs):
    return speculative_and_cache(model, prompt, n, depth, draft_depth, draft_tokens, **kwargs)[0]


def speculative_and_cache(model, prompt, n, depth, draft_depth, draft_tokens, **kwargs):
    """The tokens and the cache the stream returns once exhausted."""
    mode = Speculated(depth, draft_depth, draft_tokens)
    returned = []

    def tokens():
        returned.append((yield from stream_speculative(model, prompt, n, mode, **kwargs)))

    return torch.cat(list(tokens()), 1), returned[0]


CASES = [
    # (model seed, overrides, depth, draft depth, draft tokens)
    (0, {}, 6, 1, 4),
    (1, {"norm": "sandwich", "n_coda": 2}, 8, 2, 3),
    (2, {"n_coda": 0}, 5, 4, 1),
    (3, {"injection": "add", "state_init": "zeros"}, 4, 2, 7),
]


@pytest.mark.parametrize(("seed", "overrides", "depth", "draft_depth", "draft_tokens"), CASES)
def test_speculative_equals_plain_greedy(seed, overrides, depth, draft_depth, draft_tokens):
    model = build(seed, **overrides)
    prompt = torch.randint(0, 61, (1, 6), generator=torch.Generator().manual_seed(seed))
    plain = model.generate(prompt, 30, depth)[:, 6:]
    for reuse in (True, False):
        stats = SpeculationStats()
        tokens = speculative(
            model, prompt, 30, depth, draft_depth, draft_tokens, reuse=reuse, stats=stats
        )
        assert tokens.tolist() == plain.tolist(), reuse
        assert stats.emitted == 30 and stats.rounds > 0 and stats.hidden == 0


def test_rejected_drafts_leave_the_cache_of_plain_decoding():
    """A shallow draft of a random model is often wrong: the rounds roll back, and the cache
    afterwards holds exactly the entries plain decoding at depth K builds, in every layer
    application (no rejected token's entry survives, none is missing)."""
    model = build(0)
    prompt = torch.randint(0, 61, (1, 5), generator=torch.Generator().manual_seed(9))
    stats = SpeculationStats()
    tokens, cache = speculative_and_cache(model, prompt, 24, 6, 1, 5, stats=stats)
    assert 0 < stats.agreed < stats.drafted, "some drafts accepted, some rejected"
    plain = KVCache()
    model.decode_step(prompt, 6, plain)
    for i in range(tokens.shape[1] - 1):
        model.decode_step(tokens[:, i : i + 1], 6, plain)
    assert cache.length == plain.length == 5 + 23
    assert sorted(cache._layers) == sorted(plain._layers)
    for key, layer in plain._layers.items():
        mine = cache._layers[key]
        torch.testing.assert_close(mine.keys, layer.keys, rtol=1e-10, atol=1e-10, msg=str(key))
        torch.testing.assert_close(mine.values, layer.values, rtol=1e-10, atol=1e-10)


def test_reuse_skips_the_drafts_iterations():
    model = build(1)
    prompt = torch.randint(0, 61, (1, 4), generator=torch.Generator().manual_seed(1))
    with_reuse, without = SpeculationStats(), SpeculationStats()
    speculative(model, prompt, 20, 8, 3, 4, stats=with_reuse)
    speculative(model, prompt, 20, 8, 3, 4, stats=without, reuse=False)
    assert with_reuse.rounds == without.rounds
    chunk_tokens = with_reuse.draft_iterations // 3
    assert with_reuse.reused_iterations == 3 * chunk_tokens
    assert with_reuse.verified_iterations == 5 * chunk_tokens
    assert without.verified_iterations == 8 * chunk_tokens and without.reused_iterations == 0


def test_padded_batch_speculates_each_row_as_alone():
    model = build(2, norm="sandwich")
    generator = torch.Generator().manual_seed(3)
    rows = [torch.randint(0, 61, (n,), generator=generator).tolist() for n in (4, 9, 1)]
    ids, pad = left_pad(rows)
    stats = SpeculationStats()
    batch = speculative(model, ids, 16, 6, 1, 4, pad=pad, stats=stats)
    # Rows agreed with the verifier for different lengths: the ones behind hid columns.
    assert stats.hidden > 0
    for b, row in enumerate(rows):
        alone = model.generate(torch.tensor([row]), 16, 6)[0, len(row) :]
        assert batch[b].tolist() == alone.tolist(), b


def test_a_draft_of_the_serving_depth_is_accepted_whole():
    """Drafting with depth K - 1 of a model whose last iteration changes no argmax is a
    degenerate but exact check of the acceptance arithmetic: every draft agrees."""
    model = build(0)
    prompt = torch.randint(0, 61, (1, 3), generator=torch.Generator().manual_seed(0))
    stats = SpeculationStats()
    tokens = speculative(model, prompt, 21, 40, 39, 4, stats=stats)
    assert tokens.tolist() == model.generate(prompt, 21, 40)[:, 3:].tolist()
    # 21 tokens: the prefill's, then 4 rounds of 4 accepted drafts + the verifier's next token.
    assert stats.rounds == 4 and stats.agreed == stats.drafted == 4 * 4 and stats.hidden == 0


@pytest.mark.parametrize(
    ("depth", "draft_depth", "draft_tokens", "fragment"),
    [
        (4, 4, 2, "the draft depth must be below the serving depth"),
        (4, 6, 2, "the draft depth must be below the serving depth"),
        (4, 0, 2, "depth must be an integer >= 1"),
        (4, 2, 0, "the number of draft tokens must be an integer >= 1, got 0"),
    ],
)
def test_bad_speculation_is_refused(depth, draft_depth, draft_tokens, fragment):
    model = build(0)
    with pytest.raises(UserError, match=fragment):
        speculative(model, torch.zeros(1, 2, dtype=torch.long), 4, depth, draft_depth, draft_tokens)
