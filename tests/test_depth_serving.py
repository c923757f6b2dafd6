"""Serving any looped model by depth (model/serving.py): a tiny transformers Inkling2Loop and our
own model, each decoded through a cache built for the deepest depth, at fixed depths 1..6 and
across changes of depth, held to a reference without a cache that applies the same rule
(tests/pass_reference.py for Inkling2Loop, the call-by-call reference of
tests/test_cache_strategies.py for ours); depth-speculative decoding held to greedy decoding at
the verify depth; fixed-depth greedy tokens held to transformers' own `generate`; and the one-line
refusals of what an architecture cannot give."""

from __future__ import annotations

import pytest
import torch

from fixedfirst.errors import UserError
from fixedfirst.model import FULL_CACHE, BoundedCache, LoopedTransformer
from fixedfirst.serve.adaptive import KLExit
from fixedfirst.serve.batching import left_pad
from fixedfirst.serve.decoding import decode_steps, stream_fixed, teacher_forced
from fixedfirst.serve.modes import Adaptive, FixedDepth, Speculated
from fixedfirst.serve.speculative import SpeculationStats
from tests.conftest import tiny_model_config
from tests.inkling_helpers import VOCAB, needs_inkling
from tests.pass_reference import logits_at_depths, scrambled_inkling
from tests.test_cache_strategies import Reference

LENGTH = 24
"""Beyond the tiny model's sliding window (16): its window layers drop columns."""


def inkling_decoder(seed: int = 0):
    from fixedfirst.model.transformers_loop import TransformersLoop

    return TransformersLoop(scrambled_inkling(seed), "Inkling2LoopForCausalLM").eval()


def decode_calls(model, tokens: torch.Tensor, calls: list[tuple[int, int]], max_depth: int):
    """Logits (1, T, V) of `tokens` decoded call by call: calls[i] = (tokens in the call, depth),
    through one cache built for `max_depth`."""
    cache = model.new_cache(max_depth)
    logits, start = [], 0
    for count, depth in calls:
        logits.append(model.decode_step(tokens[:, start : start + count], depth, cache))
        start += count
    return torch.cat(logits, 1)


def per_token(calls: list[tuple[int, int]]) -> list[int]:
    return [depth for count, depth in calls for _ in range(count)]


def random_calls(seed: int, length: int, deepest: int = 6) -> list[tuple[int, int]]:
    """A prompt of 1..8 tokens at one depth, then one token per call, each at a random depth."""
    g = torch.Generator().manual_seed(seed)
    prompt = int(torch.randint(1, 9, (1,), generator=g))
    depths = torch.randint(1, deepest + 1, (length - prompt + 1,), generator=g).tolist()
    return [(prompt, depths[0])] + [(1, d) for d in depths[1:]]


# -- a transformers Inkling2Loop -----------------------------------------------------------------


@needs_inkling
@pytest.mark.parametrize("depth", [1, 2, 3, 4, 5, 6])
def test_inkling_cached_decoding_equals_the_reference_at_fixed_depths(depth):
    model = inkling_decoder()
    tokens = torch.randint(0, VOCAB, (1, LENGTH), generator=torch.Generator().manual_seed(depth))
    calls = [(5, depth)] + [(1, depth)] * (LENGTH - 5)
    cached = decode_calls(model, tokens, calls, depth)
    reference = logits_at_depths(model.network, tokens, per_token(calls))
    torch.testing.assert_close(cached, reference, atol=2e-5, rtol=0)
    torch.testing.assert_close(reference, model(tokens, depth), atol=0, rtol=0)


@needs_inkling
@pytest.mark.parametrize("seed", range(4))
def test_inkling_cached_decoding_equals_the_reference_across_changes_of_depth(seed):
    model = inkling_decoder(seed)
    tokens = torch.randint(0, VOCAB, (1, LENGTH), generator=torch.Generator().manual_seed(seed))
    calls = random_calls(seed, LENGTH)
    cached = decode_calls(model, tokens, calls, max(per_token(calls)))
    reference = logits_at_depths(model.network, tokens, per_token(calls))
    torch.testing.assert_close(cached, reference, atol=2e-5, rtol=0)
    assert torch.equal(cached.argmax(-1), reference.argmax(-1))
    # the rule matters: the same tokens each decoded at its own depth through a fresh cache differ
    alone = torch.cat(
        [model(tokens[:, : t + 1], d)[:, -1:] for t, d in enumerate(per_token(calls))], 1
    )
    assert (alone - reference).abs().max() > 1e-2


@needs_inkling
def test_an_inkling_cache_built_deeper_serves_shallower_depths_unchanged():
    """A cache built for 6 passes decoding at 2 throughout gives depth 2's logits: the copies
    for passes 3..6 are never read by a depth-2 token."""
    model = inkling_decoder(1)
    tokens = torch.randint(0, VOCAB, (1, LENGTH), generator=torch.Generator().manual_seed(9))
    calls = [(4, 2)] + [(1, 2)] * (LENGTH - 4)
    torch.testing.assert_close(
        decode_calls(model, tokens, calls, 6), model(tokens, 2), atol=2e-5, rtol=0
    )


@needs_inkling
@pytest.mark.parametrize(("depth", "draft", "n"), [(4, 1, 4), (3, 2, 3), (6, 1, 8)])
def test_inkling_speculative_decoding_equals_greedy_at_the_verify_depth(depth, draft, n):
    model = inkling_decoder(2)
    ids = torch.randint(0, VOCAB, (3, 6), generator=torch.Generator().manual_seed(depth))
    plain = torch.cat([t for t, _ in decode_steps(model, ids, 16, FixedDepth(depth))], 1)
    stats = SpeculationStats()
    mode = Speculated(depth, draft, n)
    spec = torch.cat([t for t, _ in decode_steps(model, ids, 16, mode, stats=stats)], 1)
    assert torch.equal(spec, plain)
    assert stats.drafted > 0 and stats.emitted == spec.numel()


@needs_inkling
def test_inkling_padded_batches_decode_each_row_as_alone():
    model = inkling_decoder(3)
    g = torch.Generator().manual_seed(4)
    prompts = [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in (3, 9, 6)]
    ids, pad = left_pad(prompts)
    for mode in (FixedDepth(2, prefill_depth=4), Speculated(3, 1, 3)):
        batch = torch.cat([t for t, _ in decode_steps(model, ids, 8, mode, pad)], 1)
        for row, prompt in enumerate(prompts):
            alone = torch.cat(
                [t for t, _ in decode_steps(model, torch.tensor([prompt]), 8, mode)], 1
            )
            assert torch.equal(batch[row], alone[0]), (mode, row)


@needs_inkling
@pytest.mark.parametrize("depth", [1, 3, 5])
def test_inkling_fixed_depth_greedy_tokens_equal_transformers_generate(depth):
    model = inkling_decoder(4)
    network = model.network
    prompt = torch.randint(0, VOCAB, (2, 7), generator=torch.Generator().manual_seed(depth))
    ours = torch.cat([t for t, _ in decode_steps(model, prompt, 20, FixedDepth(depth))], 1)
    network.config.loop_num_passes = depth
    theirs = network.generate(
        input_ids=prompt, max_new_tokens=20, do_sample=False, min_new_tokens=20, use_cache=True
    )
    assert torch.equal(ours, theirs[:, 7:])


@needs_inkling
def test_inkling_prefill_and_decode_at_their_own_depths_equal_the_reference():
    model = inkling_decoder(5)
    tokens = torch.randint(0, VOCAB, (1, LENGTH), generator=torch.Generator().manual_seed(5))
    for prefill_depth, depth in ((4, 2), (1, 3), (3, 3)):
        logits, depths = teacher_forced(
            model, tokens, FixedDepth(depth, prefill_depth=prefill_depth), 8
        )
        assert depths[0].tolist() == [prefill_depth] * 8 + [depth] * (LENGTH - 8)
        reference = logits_at_depths(model.network, tokens, depths[0].tolist())
        torch.testing.assert_close(logits, reference, atol=2e-5, rtol=0)


@needs_inkling
def test_what_inkling_cannot_give_is_refused_in_one_line():
    model = inkling_decoder()
    ids = torch.zeros((1, 3), dtype=torch.long)
    with pytest.raises(UserError, match="has no readout between its passes: its forward runs"):
        next(decode_steps(model, ids, 2, Adaptive(KLExit(1e-3, 4))))
    cache = model.new_cache(2)
    model.decode_step(ids, 2, cache)
    with pytest.raises(UserError, match="depth 3 is beyond the 2 passes this cache was built"):
        model.decode_step(ids[:, :1], 3, cache)
    with pytest.raises(UserError, match="a cache strategy bounds the core entries"):
        model.new_cache(2, strategy=BoundedCache(2))


# -- our own looped transformer ------------------------------------------------------------------


def own_model(seed: int = 0) -> LoopedTransformer:
    torch.manual_seed(seed)
    return LoopedTransformer(tiny_model_config()).double().eval()


@pytest.mark.parametrize("depth", [1, 2, 3, 4, 5, 6])
def test_our_cached_decoding_equals_the_reference_at_fixed_depths(depth):
    model = own_model(depth)
    tokens = torch.randint(0, 61, (1, 16), generator=torch.Generator().manual_seed(depth))
    calls = [(5, depth)] + [(1, depth)] * 11
    cached = decode_calls(model, tokens, calls, depth)
    reference = Reference(model, FULL_CACHE)
    start, expected = 0, []
    for count, call_depth in calls:
        expected.append(reference.decode(tokens[0, start : start + count].tolist(), call_depth))
        start += count
    torch.testing.assert_close(cached[0], torch.cat(expected), atol=1e-10, rtol=0)
    torch.testing.assert_close(cached, model(tokens, depth), atol=1e-10, rtol=0)


@pytest.mark.parametrize("strategy", [FULL_CACHE, BoundedCache(2)], ids=["full", "bounded2"])
@pytest.mark.parametrize("seed", range(3))
def test_our_cached_decoding_equals_the_reference_across_changes_of_depth(seed, strategy):
    model = own_model(seed)
    tokens = torch.randint(0, 61, (1, 20), generator=torch.Generator().manual_seed(seed))
    calls = random_calls(seed, 20)
    cache = model.new_cache(6, strategy=strategy)
    reference = Reference(model, strategy)
    start = 0
    for count, depth in calls:
        piece = tokens[:, start : start + count]
        cached = model.decode_step(piece, depth, cache)
        expected = reference.decode(piece[0].tolist(), depth)
        torch.testing.assert_close(cached[0], expected, atol=1e-10, rtol=0)
        start += count


def test_our_fixed_depths_through_the_serving_interface_equal_the_model_stream():
    model = own_model(1)
    ids, pad = left_pad([[3, 4, 5], [6, 7, 8, 9, 10]])
    for depth in range(1, 7):
        ours = torch.cat(list(stream_fixed(model, ids, 8, FixedDepth(depth), pad)), 1)
        assert torch.equal(ours, torch.cat(list(model.stream(ids, 8, depth, pad=pad)), 1))


def test_our_prefill_and_decode_at_their_own_depths_equal_the_reference():
    model = own_model(2)
    tokens = torch.randint(0, 61, (1, 16), generator=torch.Generator().manual_seed(2))
    for prefill_depth, depth in ((5, 2), (1, 4)):
        logits, _ = teacher_forced(model, tokens, FixedDepth(depth, prefill_depth=prefill_depth), 6)
        reference = Reference(model, FULL_CACHE)
        expected = [reference.decode(tokens[0, :6].tolist(), prefill_depth)]
        expected += [reference.decode([t], depth) for t in tokens[0, 6:].tolist()]
        torch.testing.assert_close(logits[0], torch.cat(expected), atol=1e-10, rtol=0)


def test_a_step_deeper_than_our_cache_was_built_for_is_refused():
    model = own_model()
    cache = model.new_cache(3)
    model.decode_step(torch.tensor([[1, 2]]), 2, cache)
    with pytest.raises(UserError, match="depth 4 is beyond the depth 3 this cache was built"):
        model.decode_step(torch.tensor([[3]]), 4, cache)
    with pytest.raises(UserError, match="beyond the depth 3 the cache is built for"):
        FixedDepth(4, cache_depth=3)
