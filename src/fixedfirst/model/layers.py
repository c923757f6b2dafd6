"""The transformer layer the looped model is built from.

Pre-norm RMSNorm (Zhang & Sennrich 2019), rotary position embeddings (Su et al. 2021), causal
attention through `scaled_dot_product_attention`, and a SwiGLU (Shazeer 2020) or GELU MLP.
`norm = "sandwich"` adds Huginn's norm after each residual sum (Geiping et al. 2025), which keeps
the recurrent state bounded when the core is applied many times.

The elementwise work is written to make few passes over memory, since the core runs K times per
token and every pass is paid K times: the norm is `F.rms_norm`, and q and k are each rotated by
one complex multiply (docs/design.md §10 has the measurements).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from fixedfirst.config import ModelConfig
from fixedfirst.model.kv_cache import AttentionCache


class RMSNorm(nn.Module):
    """x / rms(x) * weight, computed in float32 for stability under bf16 autocast."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.rms_norm(x.float(), (x.shape[-1],), self.weight.float(), self.eps)
        return y.type_as(x)


class RotaryEmbedding(nn.Module):
    """Rotary position tables for positions 0..max_seq_len-1 (not saved with the weights).

    Channels (2i, 2i+1) of a head form the pair rotated by angle position * base^(-2i/head_dim):
    as a complex number x_2i + i x_2i+1, rotation is one multiply by exp(i * angle), which is how
    `rotate` applies it (one pass forward, one backward).
    """

    cos: torch.Tensor
    sin: torch.Tensor

    def __init__(self, head_dim: int, max_seq_len: int, base: float) -> None:
        super().__init__()
        inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float64), inv_freq)
        # float64 tables, cast per call to the compute dtype (float64 for a float64 model); they
        # are (max_seq_len, head_dim / 2), so the cast is negligible.
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)
        self.max_seq_len = max_seq_len

    def rotate(self, x: torch.Tensor, start: int) -> torch.Tensor:
        """Rotate x of shape (B, T, ..., head_dim) as positions start..start+T-1 (any number
        of axes between T and head_dim, e.g. heads); returns a new tensor like x, computed in
        float32 (float64 for a float64 x)."""
        T = x.shape[1]
        if start + T > self.max_seq_len:
            raise ValueError(
                f"position {start + T - 1} is beyond model.max_seq_len = {self.max_seq_len}"
            )
        shape = (T, *(1,) * (x.dim() - 3), self.cos.shape[-1])
        return self._turn(x, self.cos[start : start + T], self.sin[start : start + T], shape)

    def rotate_at(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotate x (B, T, ..., head_dim) with row b's column t at position positions[b, t]:
        the rows of a padded batch, each at its own positions (the same angles, gathered, so a
        row is rotated exactly as `rotate` would rotate it alone). A position beyond the table
        is an IndexError of the gather (no check here: it would cost a host sync per call)."""
        shape = (*positions.shape, *(1,) * (x.dim() - 3), self.cos.shape[-1])
        return self._turn(x, self.cos[positions], self.sin[positions], shape)

    def _turn(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, shape: tuple[int, ...]
    ) -> torch.Tensor:
        compute = torch.float64 if x.dtype == torch.float64 else torch.float32
        cos, sin = cos.to(compute).view(shape), sin.to(compute).view(shape)
        pairs = x.to(compute).unflatten(-1, (-1, 2))
        if torch.compiler.is_compiling():
            # Inductor fuses this into one loop, but generates no code for complex numbers.
            x1, x2 = pairs.unbind(-1)
            rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
        else:
            rotated = torch.view_as_real(torch.view_as_complex(pairs) * torch.complex(cos, sin))
        return rotated.flatten(-2).type_as(x)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=False)
        self.out = nn.Linear(config.d_model, config.d_model, bias=False)

    def forward(
        self, x: torch.Tensor, rotary: RotaryEmbedding, cache: AttentionCache | None = None
    ) -> torch.Tensor:
        B, T, D = x.shape
        # unbind, not slices: its backward writes the qkv gradient in one pass (a slice's fills
        # a zero tensor per piece and adds them up).
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, D // self.n_heads).unbind(2)
        start = cache.length if cache is not None else 0
        padding = cache.padding if cache is not None else None
        if padding is None:
            q, k = rotary.rotate(q, start), rotary.rotate(k, start)
        else:  # a left-padded batch: every row at its own positions (model/kv_cache.py)
            positions = padding.positions(start, T)
            q, k = rotary.rotate_at(q, positions), rotary.rotate_at(k, positions)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, H, T, hd)
        if cache is not None:
            k, v = cache.append(k, v)
        if padding is not None:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=padding.mask(start, T))
        elif start == 0:
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
        self.hidden = config.hidden_size
        self.gated = config.mlp == "swiglu"
        self.up = nn.Linear(config.d_model, (2 if self.gated else 1) * self.hidden, bias=False)
        self.down = nn.Linear(self.hidden, config.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            # The gate and value halves of `up` as two matmuls on row slices of its weight:
            # each output is contiguous, so SiLU and the product read contiguous memory (2-3%
            # of a step at d = 128-256 against chunking one (2 * hidden)-wide output).
            gate = F.linear(x, self.up.weight[: self.hidden])
            value = F.linear(x, self.up.weight[self.hidden :])
            return self.down(F.silu(gate) * value)
        return self.down(F.gelu(self.up(x)))


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
        self, x: torch.Tensor, rotary: RotaryEmbedding, cache: AttentionCache | None = None
    ) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), rotary, cache)
        if self.sandwich:
            x = self.attn_post_norm(x)
        x = x + self.mlp(self.mlp_norm(x))
        if self.sandwich:
            x = self.mlp_post_norm(x)
        return x
