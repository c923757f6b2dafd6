"""A slow reference of the exit frontier's quality: one sequence at a time, one token at a time,
each token iterated until an exit rule written out here from docs/design.md §12 says stop, its
attention computed from the definition of the full cache (docs/design.md §19: iteration i of a
later token reads iteration min(i, d) of an earlier token that stopped at d; the coda keeps the
entry of the readout where it stopped).

It shares with the code under test only the model's weights and its layers' arithmetic (norms,
projections, rotary angles, MLP): no cache, no batch, no exit-rule class, no `RowSubset`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def stops(rule: str, threshold: float, history: dict[str, list]) -> bool:
    """Whether a token stops after its latest iteration, from what every iteration gave:
    log-probabilities ("logprobs", p_0 uniform first) and states ("states", s_0 first)."""
    if rule == "state":
        s_prev, s = history["states"][-2], history["states"][-1]
        size = torch.linalg.vector_norm(s)
        return bool(torch.linalg.vector_norm(s - s_prev) / size < threshold)
    logp = history["logprobs"]
    if rule == "kl":
        prev, cur = logp[-2], logp[-1]
        return bool((prev.exp() * (prev - cur)).sum().clamp_min(0) < threshold)
    if rule == "entropy":
        h = [-(p.exp() * p).sum() for p in logp[-2:]]
        return bool((h[1] - h[0]).abs() < threshold)
    if rule == "argmax":
        n = int(threshold)
        tops = [int(p.argmax()) for p in logp[1:]]
        return len(tops) >= n and len(set(tops[-n:])) == 1
    raise ValueError(rule)


class SlowDecoder:
    """One sequence, decoded token by token; every key and value kept by (token, application)."""

    def __init__(self, model) -> None:
        self.model = model
        self.store: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
        self.depth: list[int] = []

    def block(self, block, x: torch.Tensor, t: int, key: tuple, i: int | None) -> torch.Tensor:
        model, D = self.model, x.shape[-1]
        H = model.config.n_heads
        hd = D // H
        q, k, v = block.attn.qkv(block.attn_norm(x)).view(3, H, hd).unbind(0)
        q = model.rotary.rotate(q[None, None], t)[0, 0]
        k = model.rotary.rotate(k[None, None], t)[0, 0]
        self.store[(t, *key)] = (k, v)
        entries = []
        for u in range(t + 1):
            if key[0] == "core" and u < t:
                entries.append(self.store[(u, "core", min(i, self.depth[u]), key[2])])
            else:
                entries.append(self.store[(u, *key)])
        K = torch.stack([e[0] for e in entries])
        V = torch.stack([e[1] for e in entries])
        weights = (torch.einsum("hd,uhd->hu", q, K) / math.sqrt(hd)).softmax(-1)
        x = x + block.attn.out(torch.einsum("hu,uhd->hd", weights, V).reshape(D))
        if block.sandwich:
            x = block.attn_post_norm(x)
        x = x + block.mlp(block.mlp_norm(x))
        if block.sandwich:
            x = block.mlp_post_norm(x)
        return x

    def readout(self, state: torch.Tensor, t: int) -> torch.Tensor:
        x = self.model.core_norm(state)
        for n, block in enumerate(self.model.coda):
            x = self.block(block, x, t, ("coda", n), None)
        return self.model.head(self.model.out_norm(x))

    @torch.no_grad()
    def step(self, token: int, max_depth: int, rule: str | None, threshold: float) -> tuple:
        """Decode the next token: at max_depth for a fixed depth (rule None), else until the
        rule stops it. Returns (the logits it is read out at, its depth)."""
        model, t = self.model, len(self.depth)
        x = model.embed(torch.tensor(token))
        for n, block in enumerate(model.prelude):
            x = self.block(block, x, t, ("prelude", n), None)
        e = x
        if model.config.state_init == "zeros":
            state = torch.zeros_like(e)
        else:
            state = model.eval_state[t].to(e.dtype)
        vocab = model.config.vocab_size
        history = {"states": [state], "logprobs": [torch.full((vocab,), -math.log(vocab))]}
        self.depth.append(max_depth)  # what this token's own later reads do not look at
        for i in range(1, max_depth + 1):
            if model.adapter is None:
                x = state + e
            else:
                x = F.linear(torch.cat([state, e]), model.adapter.weight)
            for n, block in enumerate(model.core):
                x = self.block(block, x, t, ("core", i, n), i)
            state = x
            history["states"].append(state)
            if rule is None or i == max_depth:
                continue
            history["logprobs"].append(F.log_softmax(self.readout(state, t).double(), -1))
            if stops(rule, threshold, history):
                self.depth[t] = i
                break
        return self.readout(state, t), self.depth[t]


def slow_point(model, rows: torch.Tensor, max_depth: int, rule: str | None, threshold: float):
    """(logits (B, T, V), depths (B, T)) of every row decoded alone, token by token."""
    logits, depths = [], []
    for row in rows.tolist():
        decoder = SlowDecoder(model)
        out = [decoder.step(token, max_depth, rule, threshold) for token in row]
        logits.append(torch.stack([o[0] for o in out]))
        depths.append([o[1] for o in out])
    return torch.stack(logits), torch.tensor(depths)
