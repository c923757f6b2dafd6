"""Per-token KL exit: cached decoding against a reference that recomputes everything.

The reference never uses a KV cache: for every new position it runs the whole sequence through
the model in parallel, substituting, inside each core layer, the keys/values of positions that
stopped earlier with those of the iteration they stopped at (the documented rule), and reads the
last position out at every depth to apply the KL rule. It shares only the model's layers with the
code under test, not its bookkeeping (no cache growth, truncation or copying).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fixedfirst.errors import UserError
from fixedfirst.model import LoopedTransformer
from fixedfirst.serve import Adaptive, KLExit, stream_kl_exit, teacher_forced_kl_exit
from fixedfirst.serve.exit_rules import exit_rule
from tests.conftest import tiny_model_config

MAX_DEPTH = 6


def build(**overrides) -> LoopedTransformer:
    torch.manual_seed(0)
    # float64: the exit decisions compare a KL with a threshold; double precision keeps the
    # cached and recomputed KLs from landing on different sides of it through rounding alone.
    return LoopedTransformer(tiny_model_config(**overrides)).double().eval()


class _SubstitutingLayer:
    """Stands in for a layer's AttentionCache in a full-sequence pass (length 0: attention is
    causal over the whole sequence); positions that stopped before this iteration show the
    keys/values of the iteration they stopped at."""

    length = 0
    padding = None

    def __init__(self, store: dict, iteration: int, layer: int, depths: list[int]) -> None:
        self.store, self.iteration, self.layer, self.depths = store, iteration, layer, depths

    def append(self, k: torch.Tensor, v: torch.Tensor):
        k, v = k.clone(), v.clone()
        for t, d in enumerate(self.depths):
            if d < self.iteration + 1:
                k[:, :, t], v[:, :, t] = (x[:, :, t] for x in self.store[(d - 1, self.layer)])
        self.store[(self.iteration, self.layer)] = (k, v)
        return k, v


class _ReferenceCache:
    def __init__(self, depths: list[int]) -> None:
        self.store: dict = {}
        self.depths = depths

    def layer(self, kind: str, *index: int):
        assert kind == "core"
        return _SubstitutingLayer(self.store, index[0], index[1], self.depths)


@torch.no_grad()
def reference_exit(model, tokens: torch.Tensor, earlier: list[int], rule: KLExit):
    """(depth, logits) of the last position of `tokens` (1, T), given the depths at which the
    earlier positions stopped, by recomputing the whole sequence."""
    T = tokens.shape[1]
    depths = [*earlier, rule.max_depth]  # the last position's own entries are never read
    cache = _ReferenceCache(depths)
    e = model.encode(tokens)
    state = model.initial_state(e, 0, deterministic=True)
    exit_states = state.clone()
    initial = state[:, -1].clone()
    injection = model.injection(e)
    last = []
    for k in range(1, rule.max_depth + 1):
        state = model.iterate(state, injection, k - 1, cache)
        for t in range(T - 1):
            if depths[t] == k:
                exit_states[:, t] = state[:, t]
        last.append(state[:, -1].clone())
    # The rule's decision itself (its tracker) is checked on hand-computed cases in
    # test_exit_rules.py; here it is fed what a full recomputation gives at every depth.
    tracker = rule.tracker(initial, model.config.vocab_size)
    for k in range(1, rule.max_depth + 1):
        x = exit_states.clone()
        x[:, -1] = last[k - 1]
        logits = model.readout(x)[:, -1]
        logprobs = F.log_softmax(logits.float(), -1)
        if bool(tracker.update(torch.tensor([0]), last[k - 1], logprobs)) or k == rule.max_depth:
            return k, logits
    raise AssertionError("unreachable")


def reference_generate(model, prompt: torch.Tensor, n: int, rule: KLExit):
    seq = prompt.clone()
    depths = [rule.max_depth] * (prompt.shape[1] - 1)  # the prompt's prefill
    new_tokens, new_depths = [], []
    for _ in range(n):
        depth, logits = reference_exit(model, seq, depths, rule)
        token = logits.argmax(-1, keepdim=True)
        depths.append(depth)
        new_tokens.append(int(token))
        new_depths.append(depth)
        seq = torch.cat([seq, token], 1)
    return new_tokens, new_depths


def cached_generate(model, prompt: torch.Tensor, n: int, rule: KLExit):
    steps = list(stream_kl_exit(model, prompt, n, Adaptive(rule)))
    tokens = torch.cat([t for t, _ in steps], 1)
    depths = torch.stack([d for _, d in steps], 1)
    return tokens, depths


# Thresholds at which these tiny random models' tokens stop at a mix of depths (checked below):
# an untrained model's distributions are close to uniform, so its KLs are small.
VARIANTS = [
    ({}, KLExit(1e-3, MAX_DEPTH)),
    ({"norm": "sandwich", "n_coda": 2}, KLExit(2e-3, MAX_DEPTH)),
    ({"n_coda": 0}, KLExit(5e-3, MAX_DEPTH)),
    ({"norm": "sandwich", "n_coda": 2}, exit_rule("entropy", 1e-3, MAX_DEPTH)),
    ({"norm": "sandwich", "n_coda": 2}, exit_rule("state", 0.3, MAX_DEPTH)),
    ({"norm": "sandwich", "n_coda": 2}, exit_rule("argmax", 2, MAX_DEPTH)),
]
SANDWICH, THRESHOLD = VARIANTS[1][0], VARIANTS[1][1].threshold


@pytest.mark.parametrize(("overrides", "rule"), VARIANTS, ids=lambda v: getattr(v, "name", ""))
def test_cached_exit_equals_recomputation(overrides, rule):
    model = build(**overrides)
    prompt = torch.randint(0, 61, (1, 5), generator=torch.Generator().manual_seed(1))
    tokens, depths = cached_generate(model, prompt, 14, rule)
    ref_tokens, ref_depths = reference_generate(model, prompt, 14, rule)
    assert tokens[0].tolist() == ref_tokens
    assert depths[0].tolist() == ref_depths
    assert len(set(ref_depths)) > 1, "the threshold should make tokens stop at several depths"
    assert min(ref_depths) < MAX_DEPTH


@pytest.mark.parametrize("rule", [v[1] for v in VARIANTS[1:]], ids=lambda r: r.name)
def test_batch_rows_stop_independently(rule):
    """Rows of one batch stop at different depths (a row that stopped is not iterated further:
    the batch shrinks to the rows still iterating); each equals its own single-row decoding."""
    model = build(**SANDWICH)
    prompts = torch.randint(0, 61, (3, 4), generator=torch.Generator().manual_seed(2))
    tokens, depths = cached_generate(model, prompts, 10, rule)
    assert (depths.min(0).values != depths.max(0).values).any()
    for row in range(3):
        t, d = cached_generate(model, prompts[row : row + 1], 10, rule)
        assert torch.equal(t[0], tokens[row]) and torch.equal(d[0], depths[row])


def test_threshold_zero_is_fixed_depth_decoding_at_max_depth():
    model = build().float()
    prompt = torch.randint(0, 61, (2, 6), generator=torch.Generator().manual_seed(3))
    tokens, depths = cached_generate(model, prompt, 12, KLExit(0.0, MAX_DEPTH))
    fixed = model.generate(prompt, 12, MAX_DEPTH)[:, 6:]
    assert torch.equal(tokens, fixed)
    assert (depths == MAX_DEPTH).all()


def test_teacher_forced_equals_recomputation():
    model = build(**SANDWICH)
    rule = KLExit(THRESHOLD, MAX_DEPTH)
    tokens = torch.randint(0, 61, (1, 16), generator=torch.Generator().manual_seed(4))
    logits, depths = teacher_forced_kl_exit(model, tokens, Adaptive(rule), prefill=3)
    assert depths[0, :3].tolist() == [MAX_DEPTH] * 3
    torch.testing.assert_close(logits[:, :3], model(tokens[:, :3], MAX_DEPTH))
    earlier = [MAX_DEPTH] * 3
    for t in range(3, 16):
        depth, ref_logits = reference_exit(model, tokens[:, : t + 1], earlier, rule)
        assert depths[0, t].item() == depth, t
        torch.testing.assert_close(logits[:, t], ref_logits)
        earlier.append(depth)
    assert len(set(earlier[3:])) > 1


def test_huge_threshold_stops_every_token_after_one_iteration():
    model = build()
    prompt = torch.randint(0, 61, (1, 3))
    tokens, depths = cached_generate(model, prompt, 5, KLExit(1e9, MAX_DEPTH))
    assert (depths == 1).all()
    assert tokens[0].tolist() == reference_generate(model, prompt, 5, KLExit(1e9, MAX_DEPTH))[0]


@pytest.mark.parametrize(
    ("threshold", "max_depth", "fragment"),
    [(-1e-3, 4, "threshold"), (float("nan"), 4, "threshold"), (1e-3, 0, "depth")],
)
def test_bad_rule_is_a_user_error(threshold, max_depth, fragment):
    with pytest.raises(UserError, match=fragment):
        KLExit(threshold, max_depth)


def test_prompt_length_is_checked():
    model = build()
    with pytest.raises(UserError, match="max_seq_len"):
        list(stream_kl_exit(model, torch.zeros(1, 90, dtype=torch.long), 10, Adaptive(KLExit())))
