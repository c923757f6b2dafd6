"""Scoring many continuations of a few prompts: each shared prefix runs through the model once.

Recall (tasks/bios/recall.py) asks each person 30 questions, and every question begins with
`<bos>` and the person's name: 4 of the default world's 8.5 tokens per prompt. Run as whole
prompts, the recurrence would compute those 4 tokens 30 times per person at every one of 64
iterations; with the prefix computed once, recall costs about half as much.

`LoopedTransformer.prefill_shared` runs G prefixes (G, L) through the prelude, every core
iteration up to the deepest readout, and the coda at each readout depth, keeping the keys and
values of every layer application (the layout of `KVCache`: iteration i's core keys differ from
iteration j's). `SharedPrefix.rows(groups)` then serves a batch whose row b continues prefix
groups[b]: each attention call appends the continuation's keys to its group's prefix keys, so a
continuation token sees exactly what it would see in the whole prompt, at the same positions
(rotary angles and evaluation initial state from L on). Logits agree with the whole-prompt
forward up to float rounding (different matmul shapes); the coda at readout depth d attends to
the prefix's coda keys computed from the prefix state at depth d, which is why the prefix keeps a
coda entry per readout depth (`at_depth`).
"""

from __future__ import annotations

import torch

from fixedfirst.model.kv_cache import AttentionCache, KVCache, LayerCache, LayerCaches


class SharedPrefix:
    """Keys and values of G prefixes of length `length` at every layer application."""

    def __init__(self, cache: KVCache, length: int, groups: int) -> None:
        self.cache = cache
        self.length = length
        self.groups = groups

    def rows(self, groups: torch.Tensor) -> PrefixRows:
        """The prefix as seen by a batch whose row b continues prefix groups[b] (1-D indices,
        repeats allowed: many continuations of one prefix)."""
        if groups.dim() != 1:
            raise ValueError(f"groups must be 1-D, got shape {tuple(groups.shape)}")
        if len(groups) and not 0 <= int(groups.min()) <= int(groups.max()) < self.groups:
            raise ValueError(f"groups must index the {self.groups} prefixes")
        return PrefixRows(self, groups)


class PrefixRows:
    """A read-only cache for a batch of continuations (`LayerCaches`): layer applications as
    `KVCache.layer` names them, each holding its groups' prefix keys; nothing the continuation
    computes is kept (every continuation is scored in one call)."""

    def __init__(self, prefix: SharedPrefix, groups: torch.Tensor) -> None:
        self.prefix = prefix
        self.groups = groups
        self.length = prefix.length

    def layer(self, *key: object) -> _PrefixLayer:
        stored = self.prefix.cache.stored(*key)
        if stored is None or stored.keys is None or stored.values is None:
            raise ValueError(
                f"the shared prefix holds no keys for {key}: prefill it to every depth asked"
            )
        return _PrefixLayer(stored, self.groups)


class _PrefixLayer:
    """One layer application (an `AttentionCache`): the prefix keys of each row's group, then
    the row's own."""

    padding = None

    def __init__(self, stored: LayerCache, groups: torch.Tensor) -> None:
        assert stored.keys is not None and stored.values is not None
        self.keys, self.values = stored.keys[groups], stored.values[groups]
        self.length = self.keys.shape[-2]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.cat([self.keys, k], dim=-2), torch.cat([self.values, v], dim=-2)


class AtDepth:
    """The coda's layer applications at readout depth `depth`: a prefix keeps one coda entry per
    readout depth, since the coda reads the state of that depth."""

    def __init__(self, cache: LayerCaches, depth: int) -> None:
        self.cache = cache
        self.depth = depth

    def layer(self, *key: object) -> AttentionCache:
        return self.cache.layer("readout", self.depth, *key)
