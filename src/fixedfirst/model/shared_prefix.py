"""Scoring many continuations of a few prompts: each shared prefix runs through the model once.

Recall asks each person 30 questions that all begin with `<bos>` and the name, so the prefix is
computed once per person (`LoopedTransformer.prefill_shared`), keeping every layer application's
keys and values and a coda entry per readout depth, and each continuation attends to its
group's prefix at the same positions it would have in the whole prompt (docs/design.md §5).
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
