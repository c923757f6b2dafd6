"""Key/value cache for incremental decoding, one entry per layer *application*.

A looped model applies each core layer once per iteration, and every iteration sees a different
state, so iteration i's keys and values differ from iteration j's. The cache therefore keys its
entries by where a layer is applied: ("prelude", layer), ("core", iteration, layer) and
("coda", layer), as Huginn and Ouro do. A cache built at depth K holds n_prelude + K*n_core +
n_coda entries.
"""

from __future__ import annotations

import torch


class LayerCache:
    """Keys and values of one layer application, grown along the time axis."""

    def __init__(self) -> None:
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.keys is None else self.keys.shape[-2]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add (B, H, T, hd) keys/values for the next T positions; return the whole sequence."""
        if self.keys is None or self.values is None:
            self.keys, self.values = k, v
        else:
            self.keys = torch.cat([self.keys, k], dim=-2)
            self.values = torch.cat([self.values, v], dim=-2)
        return self.keys, self.values

    def truncate(self, length: int) -> None:
        """Forget every position from `length` on: adaptive exit reads out the coda at each core
        iteration to decide whether to stop, and keeps only the readout it stopped at."""
        if self.keys is not None and self.values is not None:
            self.keys = self.keys[..., :length, :]
            self.values = self.values[..., :length, :]


class KVCache:
    """All layer caches of one decoding session."""

    def __init__(self) -> None:
        self._layers: dict[tuple, LayerCache] = {}
        self.length = 0
        """Number of positions already processed."""

    def layer(self, *key: object) -> LayerCache:
        if key not in self._layers:
            self._layers[key] = LayerCache()
        return self._layers[key]

    @property
    def num_entries(self) -> int:
        """Layer applications cached so far (n_prelude + depth * n_core + n_coda)."""
        return len(self._layers)
