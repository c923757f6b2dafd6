"""The transformer layer the looped model is built from.

Pre-norm RMSNorm (Zhang & Sennrich 2019), rotary position embeddings (Su et al. 2021), causal
attention through `scaled_dot_product_attention`, and a SwiGLU (Shazeer 2020) or GELU MLP.
`norm = "sandwich"` adds Huginn's norm after each residual sum (Geiping et al. 2025), which keeps
the recurrent state bounded when the core is applied many times.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from fixedfirst.config import ModelConfig
from fixedfirst.model.kv_cache import LayerCache


class RMSNorm(nn.Module):
    """x / rms(x) * weight, computed in float32 for stability under bf16 autocast."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).type_as(x)


class RotaryEmbedding(nn.Module):
    """Rotary position tables for positions 0..max_seq_len-1 (not saved with the weights)."""

    def __init__(self, head_dim: int, max_seq_len: int, base: float) -> None:
        super().__init__()
        inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float64), inv_freq)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)
        self.max_seq_len = max_seq_len

    def forward(self, x: torch.Tensor, start: int) -> torch.Tensor:
        """Rotate x of shape (B, H, T, head_dim) as positions start..start+T-1."""
        T = x.shape[-2]
        if start + T > self.max_seq_len:
            raise ValueError(
                f"position {start + T - 1} is beyond model.max_seq_len = {self.max_seq_len}"
            )
        cos = self.cos[start : start + T].to(x.dtype)
        sin = self.sin[start : start + T].to(x.dtype)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=False)
        self.out = nn.Linear(config.d_model, config.d_model, bias=False)

    def forward(
        self, x: torch.Tensor, rotary: RotaryEmbedding, cache: LayerCache | None = None
    ) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = (
            t.view(B, T, self.n_heads, D // self.n_heads).transpose(1, 2)
            for t in self.qkv(x).split(D, dim=-1)
        )
        start = cache.length if cache is not None else 0
        q, k = rotary(q, start), rotary(k, start)
        if cache is not None:
            k, v = cache.append(k, v)
        if start == 0:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif T == 1:  # one new token attends to everything cached
            y = F.scaled_dot_product_attention(q, k, v)
        else:  # a chunk after a cached prefix: causal within the chunk, full to the prefix
            keys = torch.arange(start + T, device=x.device)
            queries = torch.arange(start, start + T, device=x.device)
            mask = keys[None, :] <= queries[:, None]
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(y.transpose(1, 2).reshape(B, T, D))


class MLP(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.gated = config.mlp == "swiglu"
        self.up = nn.Linear(config.d_model, (2 if self.gated else 1) * hidden, bias=False)
        self.down = nn.Linear(hidden, config.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(x)
        if self.gated:
            gate, value = h.chunk(2, dim=-1)
            h = F.silu(gate) * value
        else:
            h = F.gelu(h)
        return self.down(h)


class Block(nn.Module):
    """One transformer layer: attention then MLP, each as a residual branch."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(config.d_model)
        self.attn = CausalSelfAttention(config)
        self.mlp_norm = RMSNorm(config.d_model)
        self.mlp = MLP(config)
        self.sandwich = config.norm == "sandwich"
        if self.sandwich:
            self.attn_post_norm = RMSNorm(config.d_model)
            self.mlp_post_norm = RMSNorm(config.d_model)

    def forward(
        self, x: torch.Tensor, rotary: RotaryEmbedding, cache: LayerCache | None = None
    ) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), rotary, cache)
        if self.sandwich:
            x = self.attn_post_norm(x)
        x = x + self.mlp(self.mlp_norm(x))
        if self.sandwich:
            x = self.mlp_post_norm(x)
        return x
