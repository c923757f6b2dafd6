"""Cache strategies (docs/design.md §19) against a slow reference that recomputes attention from
the definition, without any cache code.

The reference decodes a sequence call by call (a prompt in one call, then one token per call,
each with its own depth): it keeps every key and value it ever computed, by token and layer
application, and for each query gathers, from every earlier token, the entry the strategy's
table names (full: iteration min(i, d); bounded:S: the deepest iteration j <= d with
j = i mod S, else d), from the tokens of the same call their entry at the query's iteration,
and computes softmax(q k^T / sqrt(hd)) v itself. It shares with the code under test only the
model's weights and its layers' arithmetic (norms, projections, rotary angles, MLP).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import pytest
import torch
import torch.nn.functional as F

from fixedfirst.errors import UserError
from fixedfirst.model import (
    FULL_CACHE,
    LAST_ITERATION,
    BoundedCache,
    KVCache,
    LoopedTransformer,
    parse_cache_strategy,
)
from fixedfirst.model.kv_cache import entries_per_token
from fixedfirst.serve.adaptive import stream_adaptive, teacher_forced_exit
from fixedfirst.serve.batching import left_pad
from fixedfirst.serve.decoding import teacher_forced
from fixedfirst.serve.exit_rules import ExitRule, ExitTracker, exit_rule
from fixedfirst.serve.modes import Adaptive, FixedDepth, Speculated
from fixedfirst.serve.speculative import stream_speculative
from tests.conftest import tiny_model_config

STRATEGIES = [FULL_CACHE, LAST_ITERATION, BoundedCache(2), BoundedCache(3), BoundedCache(16)]


def build(seed: int = 0, **overrides) -> LoopedTransformer:
    torch.manual_seed(seed)
    # float64: the reference's attention and the model's differ in summation order only.
    return LoopedTransformer(tiny_model_config(**overrides)).double().eval()


def read_iteration(strategy, i: int, d: int) -> int:
    """The iteration (1-based) of an earlier token that ran d iterations which iteration i of a
    later token reads: the table of docs/design.md §19, written out."""
    if isinstance(strategy, BoundedCache):
        S = strategy.size
        written = [j for j in range(1, d + 1) if (j - 1) % S == (i - 1) % S]
        return max(written) if written else d
    return min(i, d)


class Reference:
    """One sequence (a 1-D token list), decoded call by call at given depths."""

    def __init__(self, model: LoopedTransformer, strategy) -> None:
        self.model, self.strategy = model, strategy
        self.store: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
        self.depth: list[int] = []  # per token processed so far
        self.call: list[int] = []  # which call processed each token

    def entry(self, u: int, key: tuple, query_call: int, i: int | None) -> tuple:
        if self.call[u] == query_call:  # processed together: the same iteration
            return self.store[(u, *key)]
        if key[0] == "core":
            j = read_iteration(self.strategy, i, self.depth[u])
            return self.store[(u, "core", j, key[2])]
        return self.store[(u, *key)]

    def block(self, block, x, positions, key: tuple, i: int | None) -> torch.Tensor:
        model, (T, D) = self.model, x.shape
        H = model.config.n_heads
        hd = D // H
        h = block.attn_norm(x)
        q, k, v = block.attn.qkv(h).view(T, 3, H, hd).unbind(1)
        start = positions[0]
        q = model.rotary.rotate(q[None], start)[0]
        k = model.rotary.rotate(k[None], start)[0]
        for n, t in enumerate(positions):
            self.store[(t, *key)] = (k[n], v[n])
        call = self.call[positions[0]]
        out = []
        for n, t in enumerate(positions):
            keys, values = zip(*(self.entry(u, key, call, i) for u in range(t + 1)), strict=True)
            K, V = torch.stack(keys), torch.stack(values)  # (t + 1, H, hd)
            scores = torch.einsum("hd,uhd->hu", q[n], K) / math.sqrt(hd)
            out.append(torch.einsum("hu,uhd->hd", scores.softmax(-1), V).reshape(D))
        x = x + block.attn.out(torch.stack(out))
        if block.sandwich:
            x = block.attn_post_norm(x)
        x = x + block.mlp(block.mlp_norm(x))
        if block.sandwich:
            x = block.mlp_post_norm(x)
        return x

    @torch.no_grad()
    def decode(self, tokens: list[int], depth: int) -> torch.Tensor:
        """Process `tokens` in one call at `depth`; their logits (T, V)."""
        model = self.model
        first = len(self.depth)
        positions = list(range(first, first + len(tokens)))
        self.depth += [depth] * len(tokens)
        self.call += [max(self.call, default=-1) + 1] * len(tokens)
        x = model.embed(torch.tensor(tokens))
        for n, block in enumerate(model.prelude):
            x = self.block(block, x, positions, ("prelude", n), None)
        e = x
        if model.config.state_init == "zeros":
            state = torch.zeros_like(e)
        else:
            state = model.eval_state[positions].to(e.dtype)
        for i in range(1, depth + 1):
            if model.adapter is None:
                x = state + e
            else:
                x = F.linear(torch.cat([state, e], -1), model.adapter.weight)
            for n, block in enumerate(model.core):
                x = self.block(block, x, positions, ("core", i, n), i)
            state = x
        x = model.core_norm(state)
        for n, block in enumerate(model.coda):
            x = self.block(block, x, positions, ("coda", n), None)
        return model.head(model.out_norm(x))


def reference_logits(model, strategy, tokens: list[int], depths: list[int], prefill: int):
    """Logits of every position: the first `prefill` tokens in one call at depths[0], then one
    call per token at its own depth."""
    ref = Reference(model, strategy)
    parts = [ref.decode(tokens[:prefill], depths[0])] if prefill else []
    for t in range(prefill, len(tokens)):
        parts.append(ref.decode([tokens[t]], depths[t]))
    return torch.cat(parts)


class _Scripted(ExitTracker):
    def __init__(self, depths: torch.Tensor) -> None:
        self.depths, self.k = depths, 0

    def update(self, rows, state, logprobs):
        self.k += 1
        return self.depths[rows] <= self.k


@dataclass(frozen=True)
class ScriptedExit(ExitRule):
    """Stops the n-th decoded position of row b at script[n][b], whatever the model computes,
    so that a test chooses which slots each position leaves unreached."""

    threshold: float = 0.0
    script: tuple = ()
    calls: list = field(default_factory=list, compare=False)
    name: ClassVar[str] = "scripted"
    label: ClassVar[str] = "scripted"
    reads_out: ClassVar[bool] = False

    def tracker(self, initial_state, vocab):
        self.calls.append(None)
        return _Scripted(torch.tensor(self.script[len(self.calls) - 1]))


@dataclass(frozen=True)
class ScriptedReadingOut(ScriptedExit):
    """The same, reading out after every iteration as the KL rule does."""

    reads_out: ClassVar[bool] = True


SCRIPT = [1, 5, 2, 6, 3, 1, 4, 2, 6, 1, 3, 5]
"""Depths (max 6) of the positions after the prompt: each bounded strategy's slots are left
unreached by some, wrapped by others."""


def sequence(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 61, (1, n), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
def test_fixed_depth_decoding_reads_what_the_strategy_says(strategy):
    """Depth 7 wraps every bounded strategy's slots at least twice; a prompt of 5 in one call."""
    model = build(0, norm="sandwich")
    tokens = sequence(14, 1)
    logits, _ = teacher_forced(model, tokens, FixedDepth(7, cache_strategy=strategy), prefill=5)
    expected = reference_logits(model, strategy, tokens[0].tolist(), [7] * 14, prefill=5)
    torch.testing.assert_close(logits[0], expected, rtol=0, atol=1e-9)


def test_the_strategies_differ_where_the_table_says_they_do():
    """What the reference is worth: at depth 7, bounded:3, bounded:2 and last read different
    entries, so their logits differ from the full cache's after the prompt, and bounded:16
    (no slot shared) is the full cache to the last bit."""
    model = build(0)
    tokens = sequence(10, 2)
    full, _ = teacher_forced(model, tokens, FixedDepth(7), prefill=4)
    for strategy in (LAST_ITERATION, BoundedCache(2), BoundedCache(3)):
        logits, _ = teacher_forced(model, tokens, FixedDepth(7, cache_strategy=strategy), prefill=4)
        assert torch.equal(logits[:, :4], full[:, :4])  # the prompt's call: every strategy alike
        assert (logits[:, 4:] - full[:, 4:]).abs().amax() > 1e-4, strategy
    wide, _ = teacher_forced(
        model, tokens, FixedDepth(7, cache_strategy=BoundedCache(16)), prefill=4
    )
    assert torch.equal(wide, full)


def test_the_full_cache_token_by_token_is_one_forward():
    model = build(3, injection="add", state_init="zeros")
    tokens = sequence(12, 3)
    logits, _ = teacher_forced(model, tokens, FixedDepth(5), prefill=0)
    torch.testing.assert_close(logits, model(tokens, 5), rtol=0, atol=1e-10)


@pytest.mark.parametrize("rule_class", [ScriptedExit, ScriptedReadingOut])
@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
def test_early_exit_decoding_reads_what_the_strategy_says(strategy, rule_class):
    """Positions stop at 1..6 (`SCRIPT`): a position that stopped before a slot shows it its
    last iteration, one that went past S its deepest write there."""
    model = build(0)
    tokens = sequence(3 + len(SCRIPT), 4)
    rule = rule_class(max_depth=6, script=tuple((d,) for d in SCRIPT))
    logits, depths = teacher_forced_exit(
        model, tokens, Adaptive(rule, cache_strategy=strategy), prefill=3
    )
    assert depths[0].tolist() == [6, 6, 6, *SCRIPT]
    expected = reference_logits(model, strategy, tokens[0].tolist(), depths[0].tolist(), 3)
    torch.testing.assert_close(logits[0], expected, rtol=0, atol=1e-9)


@pytest.mark.parametrize("strategy", [FULL_CACHE, BoundedCache(3)], ids=lambda s: s.name)
def test_rows_that_stop_apart_in_a_batch_read_what_they_would_alone(strategy):
    """Rows of one batch stop at different depths at every position; each row is held to the
    reference decoding of its own sequence at its own depths."""
    model = build(1)
    tokens = torch.cat([sequence(10, 20), sequence(10, 21)])
    script = tuple((a, b) for a, b in zip(SCRIPT[:7], SCRIPT[5:], strict=True))
    rule = ScriptedExit(max_depth=6, script=script)
    logits, depths = teacher_forced_exit(
        model, tokens, Adaptive(rule, cache_strategy=strategy), prefill=3
    )
    for b in range(2):
        row = depths[b].tolist()
        assert row[3:] == [s[b] for s in script]
        expected = reference_logits(model, strategy, tokens[b].tolist(), row, prefill=3)
        torch.testing.assert_close(logits[b], expected, rtol=0, atol=1e-9)


@pytest.mark.parametrize("strategy", [LAST_ITERATION, BoundedCache(3)], ids=lambda s: s.name)
def test_generation_is_the_reference_greedy_decoding(strategy):
    """`model.stream` prefills the prompt in one pass and decodes each token alone: every token
    it generates is the argmax of the reference's logits for that position."""
    model = build(1, n_coda=2)
    prompt = sequence(4, 5)
    generated = torch.cat(list(model.stream(prompt, 10, 6, cache_strategy=strategy)), 1)
    tokens = torch.cat([prompt, generated[:, :-1]], 1)[0].tolist()
    expected = reference_logits(model, strategy, tokens, [6] * len(tokens), prefill=4)
    assert expected[3:].argmax(-1).tolist() == generated[0].tolist()


@pytest.mark.parametrize("strategy", [LAST_ITERATION, BoundedCache(3)], ids=lambda s: s.name)
def test_padded_batches_decode_each_row_as_alone(strategy):
    """Fixed depth and early exit, rows of different lengths in one left-padded batch."""
    model = build(2)
    rows = [sequence(n, 10 + n)[0].tolist() for n in (3, 7, 5)]
    ids, pad = left_pad(rows)
    batch = torch.cat(list(model.stream(ids, 8, 6, pad=pad, cache_strategy=strategy)), 1)
    mode = Adaptive(exit_rule("kl", 2e-3, 6), cache_strategy=strategy)
    steps = list(stream_adaptive(model, ids, 8, mode, pad=pad))
    adaptive = torch.cat([t for t, _ in steps], 1)
    for b, row in enumerate(rows):
        alone = model.stream(torch.tensor([row]), 8, 6, cache_strategy=strategy)
        assert batch[b].tolist() == torch.cat(list(alone), 1)[0].tolist(), b
        single = list(stream_adaptive(model, torch.tensor([row]), 8, mode))
        assert adaptive[b].tolist() == [int(t) for t, _ in single], b


@pytest.mark.parametrize("strategy", [FULL_CACHE, BoundedCache(6), BoundedCache(9)])
def test_speculation_equals_plain_greedy_under_the_same_strategy(strategy):
    model = build(0)
    prompt = sequence(5, 6)
    plain = model.generate(prompt, 24, 6, cache_strategy=strategy)[:, 5:]
    steps = stream_speculative(model, prompt, 24, Speculated(6, 2, 4, strategy))
    assert torch.cat(list(steps), 1).tolist() == plain.tolist()


@pytest.mark.parametrize("strategy", [LAST_ITERATION, BoundedCache(5)])
def test_speculation_refuses_a_cache_that_shares_slots_below_the_serving_depth(strategy):
    with pytest.raises(UserError, match="needs every iteration's cache entry up to the serving"):
        Speculated(6, 2, 4, strategy)
    with pytest.raises(UserError, match="use --cache full, or bounded:S with S >= 6"):
        Speculated(6, 2, cache_strategy=strategy)


def test_bytes_per_token_follow_the_entries_the_strategy_keeps():
    """Measured from the tensors a decoding session holds, against the count of entries: at
    depth 64 bounded:4 keeps 1 + 4 x 2 + 1 = 10 entries of the full cache's 130."""
    model = build(0)
    config = model.config
    tokens = sequence(6, 7)
    per_entry = 2 * config.d_model * 8  # keys and values, float64
    held = {}
    for strategy in (FULL_CACHE, BoundedCache(4), LAST_ITERATION):
        cache = KVCache(strategy=strategy)
        model.decode_step(tokens, 64, cache)
        held[strategy.name] = cache.nbytes / tokens.numel()
        assert held[strategy.name] == entries_per_token(config, 64, strategy) * per_entry
    assert held["full"] == 130 * per_entry and held["bounded:4"] == 10 * per_entry
    assert held["bounded:4"] <= held["full"] / 8 and held["last"] == 4 * per_entry


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("bounded:0", "a bounded cache keeps S >= 1 slots per core layer, got S = 0"),
        ("bounded:x", "bounded takes the number of slots, e.g. bounded:4"),
        ("bounded", "bounded takes the number of slots"),
        ("huginn", "unknown cache strategy; choose one of full, bounded:S, last"),
    ],
)
def test_bad_strategies_are_one_line(text, message):
    with pytest.raises(UserError, match=message):
        parse_cache_strategy(text)


def test_strategy_names_round_trip():
    for strategy in STRATEGIES:
        assert parse_cache_strategy(strategy.name) == strategy
