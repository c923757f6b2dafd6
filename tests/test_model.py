"""The looped transformer: causality, the recurrence, one-pass depth evaluation, cached decoding."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fixedfirst.errors import UserError
from fixedfirst.model import KVCache, LoopedTransformer
from tests.conftest import tiny_model_config

VARIANTS = [
    {},
    {"norm": "sandwich"},
    {"injection": "add", "mlp": "gelu"},
    {"state_init": "zeros", "tie_embeddings": True},
    {"n_prelude": 0, "n_coda": 0},
    {"coda_norm": False, "norm": "sandwich"},
]


def build(**overrides) -> LoopedTransformer:
    torch.manual_seed(0)
    return LoopedTransformer(tiny_model_config(**overrides)).eval()


@pytest.mark.parametrize("overrides", VARIANTS)
def test_causal(overrides):
    model = build(**overrides)
    x = torch.randint(0, 61, (2, 20))
    y = x.clone()
    y[:, 12] = (y[:, 12] + 1) % 61
    a, b = model(x, 3), model(y, 3)
    torch.testing.assert_close(a[:, :12], b[:, :12])
    assert not torch.allclose(a[:, 12:], b[:, 12:])


@pytest.mark.parametrize("overrides", VARIANTS)
def test_forward_equals_hand_unroll(overrides):
    model = build(**overrides)
    x = torch.randint(0, 61, (2, 16))
    depth = 3
    h = model.embed(x)
    for block in model.prelude:
        h = block(h, model.rotary)
    if model.config.state_init == "zeros":
        s = torch.zeros_like(h)
    else:
        s = model.eval_state[:16].expand_as(h)
    for _ in range(depth):
        s = model.adapter(torch.cat([s, h], -1)) if model.adapter is not None else s + h
        for block in model.core:
            s = block(s, model.rotary)
    out = model.core_norm(s)
    for block in model.coda:
        out = block(out, model.rotary)
    expected = model.head(model.out_norm(out))
    torch.testing.assert_close(model(x, depth), expected)


@pytest.mark.parametrize("overrides", VARIANTS)
def test_nll_by_depth_equals_separate_forwards(overrides):
    model = build(**overrides)
    x = torch.randint(0, 61, (3, 24))
    depths = [1, 2, 5, 9]
    one_pass = model.nll_by_depth(x[:, :-1], x[:, 1:], depths)
    assert list(one_pass) == depths
    for d in depths:
        logits = model(x[:, :-1], d)
        separate = F.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten()).item()
        assert abs(one_pass[d] - separate) < 1e-5


def test_logits_by_depth_at_chosen_positions_are_those_of_the_full_readout(tiny_model):
    x = torch.randint(0, 61, (3, 14))
    positions = torch.tensor([[0, 5, 13], [2, 2, 7], [13, 12, 11]])
    full = dict(tiny_model.logits_by_depth(x, [1, 6]))
    chosen = dict(tiny_model.logits_by_depth(x, [1, 6], positions))
    for depth in (1, 6):
        assert chosen[depth].shape == (3, 3, 61)
        want = full[depth].gather(1, positions[..., None].expand(-1, -1, 61))
        torch.testing.assert_close(chosen[depth], want)


def test_nll_by_depth_honours_ignore_index(tiny_model):
    x = torch.randint(0, 61, (2, 12))
    targets = x[:, 1:].clone()
    targets[:, :5] = -100
    got = tiny_model.nll_by_depth(x[:, :-1], targets, [2])[2]
    logits = tiny_model(x[:, :-1], 2)[:, 5:]
    want = F.cross_entropy(logits.flatten(0, 1), x[:, 6:].flatten()).item()
    assert abs(got - want) < 1e-5


@pytest.mark.parametrize("overrides", [{}, {"norm": "sandwich"}])
def test_large_depths_stay_finite(overrides):
    model = build(**overrides)
    x = torch.randint(0, 61, (2, 16))
    for depth, logits in model.logits_by_depth(x, [1, 16, 32, 64]):
        assert torch.isfinite(logits).all(), depth


def test_evaluation_is_reproducible_training_is_random(tiny_model):
    x = torch.randint(0, 61, (2, 16))
    first = tiny_model.nll_by_depth(x[:, :-1], x[:, 1:], [4])
    assert tiny_model.nll_by_depth(x[:, :-1], x[:, 1:], [4]) == first
    torch.testing.assert_close(tiny_model(x, 4), tiny_model(x, 4), rtol=0, atol=0)
    tiny_model.train()
    assert not torch.equal(tiny_model(x, 4), tiny_model(x, 4))  # fresh initial state each call


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_bad_depth_is_a_user_error(tiny_model, bad):
    x = torch.randint(0, 61, (1, 4))
    with pytest.raises(UserError, match="depth must be an integer >= 1"):
        tiny_model(x, bad)
    with pytest.raises(UserError):
        list(tiny_model.logits_by_depth(x, [1, bad]))


def test_truncated_backprop_only_reaches_last_iterations():
    model = build()
    model.train()
    x = torch.randint(0, 61, (2, 12))
    torch.manual_seed(1)
    model(x, 5, grad_depth=5).sum().backward()
    full = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    torch.manual_seed(1)
    model(x, 5).sum().backward()
    for n, p in model.named_parameters():  # grad_depth >= depth is full backprop
        torch.testing.assert_close(p.grad, full[n])
    model.zero_grad()
    torch.manual_seed(1)
    out = model(x, 5, grad_depth=1)
    assert out.requires_grad
    out.sum().backward()
    core_grad = model.core[0].mlp.down.weight.grad
    assert core_grad is not None
    assert not torch.allclose(core_grad, full["core.0.mlp.down.weight"])


def hand_unrolled_logits(model, tokens, depth, free, seeds):
    """The recurrence written out from the model's parts: `free` iterations without gradient
    (their result detached), then depth - free with it. Independent of `forward`'s loop."""
    x = model.embed(tokens)
    for block in model.prelude:
        x = block(x, model.rotary)
    e = x
    state = model.initial_state(e, 0, deterministic=False, state_seeds=seeds)

    def iteration(s):
        s = model.adapter(torch.cat([s, e], dim=-1)) if model.adapter is not None else s + e
        for block in model.core:
            s = block(s, model.rotary)
        return s

    with torch.no_grad():
        for _ in range(free):
            state = iteration(state)
    state = state.detach()
    for _ in range(depth - free):
        state = iteration(state)
    x = model.core_norm(state)
    for block in model.coda:
        x = block(x, model.rotary)
    return model.head(model.out_norm(x))


@pytest.mark.parametrize("overrides", [{}, {"injection": "add"}])
@pytest.mark.parametrize(("depth", "grad_depth"), [(5, 2), (5, 1), (4, 3), (3, 3), (2, 7)])
def test_truncated_backprop_equals_a_hand_detached_unroll(overrides, depth, grad_depth):
    """grad_depth = s: exactly the last s iterations carry gradients (an off-by-one in the
    number of no-grad iterations changes the gradients of the core and of the prelude)."""
    model = build(**overrides).train()
    x = torch.randint(0, 61, (2, 12))
    seeds = [11, 12]
    model(x, depth, grad_depth=grad_depth, state_seeds=seeds).square().mean().backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    free = max(0, depth - grad_depth)
    hand_unrolled_logits(model, x, depth, free, seeds).square().mean().backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(got[n], p.grad, msg=n)
    if free:  # and the unroll with one more gradient iteration differs, so the test can fail
        model.zero_grad()
        hand_unrolled_logits(model, x, depth, free - 1, seeds).square().mean().backward()
        core = "core.0.mlp.down.weight"
        assert not torch.allclose(got[core], dict(model.named_parameters())[core].grad)


def test_parameter_counts_cover_every_parameter_once():
    for overrides in VARIANTS:
        model = build(**overrides)
        counts = model.parameter_counts()
        assert counts["total"] == sum(p.numel() for p in model.parameters())
        assert sum(v for k, v in counts.items() if k != "total") == counts["total"]
        if overrides.get("tie_embeddings"):
            assert counts["head"] == 0
        # Depth is not a parameter: the same tensors serve every depth, and each gets a gradient
        # at depth 1 and at depth 7 alike.
        for depth in (1, 7):
            model.zero_grad()
            model(torch.randint(0, 61, (1, 8)), depth).sum().backward()
            assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("overrides", VARIANTS)
def test_cached_decoding_equals_full_recomputation(overrides):
    model = build(**overrides)
    x = torch.randint(0, 61, (2, 30))
    full = model(x, 4)
    cache = KVCache()
    parts = [model.decode_step(x[:, :10], 4, cache), model.decode_step(x[:, 10:11], 4, cache)]
    parts.append(model.decode_step(x[:, 11:30], 4, cache))
    torch.testing.assert_close(torch.cat(parts, 1), full, atol=1e-5, rtol=1e-5)
    cfg = model.config
    assert cache.num_entries == cfg.n_prelude + 4 * cfg.n_core + cfg.n_coda


@pytest.mark.parametrize("overrides", VARIANTS)
def test_continuations_of_a_shared_prefix_score_as_whole_prompts(overrides):
    model = build(**overrides)
    prefixes = torch.randint(0, 61, (3, 5))
    groups = torch.tensor([2, 0, 0, 1, 2, 2, 0])  # repeats, out of order
    continuations = torch.randint(0, 61, (7, 6))
    whole = torch.cat([prefixes[groups], continuations], 1)
    depths = [1, 3, 8]
    expected = dict(model.logits_by_depth(whole, depths))
    shared = model.prefill_shared(prefixes, [*depths, 12])  # deeper than asked is fine
    positions = torch.tensor([[0, 3, 5]]).expand(7, -1)
    after = shared.rows(groups)
    got = dict(model.logits_by_depth(continuations, depths, positions, after))
    assert sorted(got) == depths
    for depth in depths:
        at = expected[depth][:, 5:].gather(1, positions[..., None].expand(-1, -1, 61))
        torch.testing.assert_close(got[depth], at, atol=1e-5, rtol=1e-5)
    other = model.prefill_shared(prefixes.flip(0), depths)  # a different prefix changes logits
    moved = dict(model.logits_by_depth(continuations, depths, positions, other.rows(groups)))
    assert not torch.allclose(moved[8], got[8])
    with pytest.raises(ValueError, match="index the 3 prefixes"):
        shared.rows(torch.tensor([0, 3]))
    one = dict(model.logits_by_depth(continuations[:, :1], [3], None, after))  # one token each
    torch.testing.assert_close(one[3][:, 0], expected[3][:, 5], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="prefill it to every depth"):
        list(model.logits_by_depth(continuations, [16], None, after))


@pytest.mark.parametrize("depth", [1, 3, 6])
def test_greedy_generation_equals_argmax_recomputation(depth):
    model = build()
    prompt = torch.randint(0, 61, (3, 7))
    generated = model.generate(prompt, max_new_tokens=12, depth=depth)
    seq = prompt
    for _ in range(12):
        nxt = model(seq, depth)[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], 1)
    assert torch.equal(generated, seq)


def test_sampling_is_seeded_and_length_is_checked(tiny_model):
    prompt = torch.randint(0, 61, (1, 5))
    a = tiny_model.generate(
        prompt, 10, 2, temperature=1.0, generator=torch.Generator().manual_seed(3)
    )
    b = tiny_model.generate(
        prompt, 10, 2, temperature=1.0, generator=torch.Generator().manual_seed(3)
    )
    assert torch.equal(a, b)
    with pytest.raises(UserError, match="max_seq_len"):
        tiny_model.generate(prompt, 200, 2)


def written_out_block(block, x: torch.Tensor, config) -> torch.Tensor:
    """One transformer layer from its weights, without the model's layer code: RMSNorm with its
    gain, attention with rotary angles position * base^(-2i / head_dim) on channel pairs
    (2i, 2i + 1), a causal softmax written as masked scores, SwiGLU (SiLU of the gate half) or
    GELU, and the sandwich norms after each residual sum."""
    B, T, D = x.shape
    H, hd = config.n_heads, D // config.n_heads

    def norm(h, gain):
        return h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * gain

    def rotate(h):  # (B, T, H, hd)
        i = torch.arange(hd // 2, dtype=torch.float64)
        angle = torch.arange(T, dtype=torch.float64)[:, None] * config.rope_base ** (-2 * i / hd)
        cos, sin = angle.cos()[None, :, None].float(), angle.sin()[None, :, None].float()
        even, odd = h[..., 0::2], h[..., 1::2]
        return torch.stack((even * cos - odd * sin, even * sin + odd * cos), -1).flatten(-2)

    h = norm(x, block.attn_norm.weight)
    q, k, v = (h @ block.attn.qkv.weight.T).view(B, T, 3, H, hd).unbind(2)
    q, k, v = rotate(q).transpose(1, 2), rotate(k).transpose(1, 2), v.transpose(1, 2)
    scores = q @ k.transpose(-1, -2) / hd**0.5
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    attended = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D)
    x = x + attended @ block.attn.out.weight.T
    if config.norm == "sandwich":
        x = norm(x, block.attn_post_norm.weight)
    h = norm(x, block.mlp_norm.weight)
    up = block.mlp.up.weight
    if config.mlp == "swiglu":
        hidden = up.shape[0] // 2
        inner = F.silu(h @ up[:hidden].T) * (h @ up[hidden:].T)
    else:
        inner = F.gelu(h @ up.T)
    x = x + inner @ block.mlp.down.weight.T
    if config.norm == "sandwich":
        x = norm(x, block.mlp_post_norm.weight)
    return x


@pytest.mark.parametrize(
    "overrides", [{}, {"norm": "sandwich"}, {"mlp": "gelu", "norm": "sandwich", "n_heads": 2}]
)
def test_a_layer_equals_the_layer_written_out(overrides):
    model = build(**overrides)
    with torch.no_grad():  # gains away from 1, so that a norm that ignores its gain shows
        for p in model.parameters():
            if p.dim() == 1:
                p.copy_(0.5 + torch.rand_like(p))
    block = model.core[0]
    x = torch.randn(2, 14, model.config.d_model)
    torch.testing.assert_close(
        block(x, model.rotary), written_out_block(block, x, model.config), rtol=1e-5, atol=1e-5
    )


def test_sampling_follows_the_softmax_at_its_temperature():
    """Frequencies of 20,000 draws against softmax(logits / T); T -> 0 is the argmax."""
    from fixedfirst.model.looped import sample_next

    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]]).expand(20_000, -1)
    for temperature in (0.5, 2.0):
        draws = sample_next(logits, temperature, torch.Generator().manual_seed(0))
        frequencies = torch.bincount(draws[:, 0], minlength=4).float() / 20_000
        expected = torch.softmax(logits[0] / temperature, -1)
        torch.testing.assert_close(frequencies, expected, atol=0.015, rtol=0)
    assert torch.equal(sample_next(logits[:3], 0.0), torch.zeros(3, 1, dtype=torch.long))


def test_the_training_initial_state_is_the_truncated_normal_its_design_names():
    """Against scipy's truncated normal (an independent reference): the first four moments and
    the whole distribution (Kolmogorov-Smirnov), the bounds, and one row per seed whatever the
    batch around it. A rejection-free draw through the quantile is easy to get subtly wrong: a
    missing std, an uncut tail or a clip instead of a truncation all fail here."""
    stats = pytest.importorskip("scipy.stats")
    model = LoopedTransformer(tiny_model_config())
    d, std = model.config.d_model, model.state_std
    e = torch.zeros(64, 32, d)
    s = model.initial_state(e, 0, deterministic=False, state_seeds=range(64)).double().flatten()
    reference = stats.truncnorm(-3, 3, scale=std)
    assert s.abs().max() <= 3 * std
    assert s.mean().item() == pytest.approx(0, abs=4 * reference.std() / len(s) ** 0.5)
    assert s.var().item() == pytest.approx(reference.var(), rel=0.01)
    assert (s**4).mean().item() == pytest.approx(reference.moment(4), rel=0.02)
    assert stats.kstest(s.numpy(), reference.cdf).pvalue > 1e-3
    alone = model.initial_state(e[:1], 0, deterministic=False, state_seeds=[5])
    assert torch.equal(alone[0], model.initial_state(e, 0, False, state_seeds=range(64))[5])


def test_the_evaluation_state_is_the_draw_every_earlier_run_was_scored_with():
    """The fixed evaluation state is not saved with the weights: every model draws it again.
    These are torch 2.13's `trunc_normal_` values for (96, 32), std sqrt(2 / 160), seed 0,
    recorded there; torch 2.11's `trunc_normal_` draws others, our own draw does not."""
    from fixedfirst.model.looped import evaluation_state

    std = (2 / (5 * 32)) ** 0.5
    state = evaluation_state(96, 32, std, seed=0)
    assert state.double().sum().item() == pytest.approx(-3.1206001254213334, abs=1e-12)
    first = [-0.12587271630764008, -0.12883777916431427, -0.028015537187457085]
    assert state[0, :3].tolist() == first
    assert state[95, -2:].tolist() == [-0.1309637427330017, -0.09408802539110184]
    assert state.abs().max() <= 3 * std
    model = LoopedTransformer(tiny_model_config(max_seq_len=96, d_model=32, eval_seed=0))
    assert torch.equal(model.eval_state, state)
