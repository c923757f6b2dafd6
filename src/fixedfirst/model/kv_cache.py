"""Key/value cache for incremental decoding, one entry per layer *application*.

Iteration i of a core layer sees another state than iteration j, so entries are keyed by where a
layer is applied: ("prelude", layer), ("core", iteration, layer), ("coda", layer). The cache
also carries a padded batch's per-row positions and mask (`Padding`), the columns speculation
hides, and the rows adaptive exit still iterates (`RowSubset`). `AttentionCache` and
`LayerCaches` are the two protocols the model asks of a cache (docs/design.md §11, §16).
"""

from __future__ import annotations

from typing import Protocol

import torch


class AttentionCache(Protocol):
    """What attention needs from a cache: the columns already held, the padding (None: every
    column valid, the unpadded paths), and where the new keys and values go."""

    @property
    def length(self) -> int:
        """Columns held before this call's keys: where their positions start."""
        ...

    @property
    def padding(self) -> Padding | None: ...

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Take the new (B, H, T, hd) keys and values; return every key and value the new
        queries attend to (held ones first)."""
        ...


class LayerCaches(Protocol):
    """What the model's pieces (`LoopedTransformer.encode`, `iterate`, `readout`) take as
    `cache`: the cache of each layer application, named ("prelude", layer),
    ("core", iteration, layer) or ("coda", layer)."""

    def layer(self, *key: object) -> AttentionCache: ...


class Padding:
    """Which columns of each row belong to its sequence: valid[b, c]. Columns beyond the stored
    width are valid (each new column is a row's next token). Left padding is invalid columns
    at the start of a row; a batch row of depth-speculative decoding hides the columns of its
    rejected draft tokens in the middle (`KVCache.hide`)."""

    def __init__(self, valid: torch.Tensor) -> None:
        self.valid = valid
        self._memo: tuple[int, int, torch.Tensor, torch.Tensor] | None = None

    @classmethod
    def left(cls, pad: torch.Tensor) -> Padding:
        """pad[b] leading pad columns in row b."""
        columns = torch.arange(int(pad.max()), device=pad.device)
        return cls(columns[None, :] >= pad[:, None])

    def positions(self, start: int, length: int) -> torch.Tensor:
        """(B, length) positions of columns start..start+length-1 in each row's own sequence:
        the number of valid columns before each (what an invalid column gets is never read)."""
        return self._computed(start, length)[2]

    def mask(self, start: int, length: int) -> torch.Tensor:
        """(B, 1, length, start + length) boolean attention mask of those columns: causal, no
        invalid column visible except to itself."""
        return self._computed(start, length)[3]

    def _computed(self, start: int, length: int) -> tuple[int, int, torch.Tensor, torch.Tensor]:
        # Every layer of a step asks for the same (start, length): computed once per step.
        if self._memo is None or self._memo[:2] != (start, length):
            width = start + length
            valid = self._valid(width)
            before = valid.cumsum(1) - valid.long()  # valid columns before each column
            positions = before[:, start:width]
            device = valid.device
            columns = torch.arange(start, width, device=device)
            keys = torch.arange(width, device=device)
            causal = keys[None, :] <= columns[:, None]  # (length, width)
            itself = keys[None, :] == columns[:, None]
            mask = causal[None] & (valid[:, None, :] | itself[None])
            self._memo = (start, length, positions, mask[:, None])
        return self._memo

    def _valid(self, width: int) -> torch.Tensor:
        valid = self.valid
        if valid.shape[1] < width:
            more = valid.new_ones((valid.shape[0], width - valid.shape[1]))
            self.valid = valid = torch.cat([valid, more], 1)
        return valid[:, :width]

    def hide(self, first: torch.Tensor, stop: int) -> None:
        """Make columns first[b]..stop-1 of each row b invalid."""
        valid = self._valid(stop).clone()
        columns = torch.arange(stop, device=valid.device)
        valid &= ~((columns[None, :] >= first[:, None]) & (columns[None, :] < stop))
        self.valid = valid
        self._memo = None

    def truncate(self, length: int) -> None:
        self.valid = self.valid[:, :length]
        self._memo = None

    def rows(self, rows: torch.Tensor) -> Padding:
        return Padding(self.valid[rows])


class LayerCache:
    """Keys and values of one layer application, grown along the time axis (an
    `AttentionCache`)."""

    def __init__(self, owner: KVCache | None = None) -> None:
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None
        self.owner = owner

    @property
    def padding(self) -> Padding | None:
        """The session's padding (it may appear after the layer: `KVCache.hide`)."""
        return None if self.owner is None else self.owner.padding

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
        """Forget every position from `length` on (a rejected draft, a readout not kept)."""
        if self.keys is not None and self.values is not None:
            self.keys = self.keys[..., :length, :]
            self.values = self.values[..., :length, :]


class KVCache:
    """All layer caches of one decoding session (`LayerCaches`).

    pad: (B,) leading pad columns per row of a left-padded batch, or None; a batch without
    padding takes the unpadded attention paths (an all-zero `pad` is dropped).
    """

    def __init__(self, pad: torch.Tensor | None = None) -> None:
        self._layers: dict[tuple, LayerCache] = {}
        self.length = 0
        """Number of columns (padding included) already processed."""
        self.padding = Padding.left(pad) if pad is not None and bool(pad.any()) else None

    def layer(self, *key: object) -> LayerCache:
        if key not in self._layers:
            self._layers[key] = LayerCache(self)
        return self._layers[key]

    def stored(self, *key: object) -> LayerCache | None:
        """The layer application's cache if anything was stored there, else None."""
        return self._layers.get(key)

    def positions(self, length: int) -> torch.Tensor | None:
        """(B, length) own positions of the next `length` columns, None without padding."""
        return None if self.padding is None else self.padding.positions(self.length, length)

    def truncate(self, length: int) -> None:
        """Forget every column from `length` on, in every layer application (depth-speculative
        decoding rolls back the entries of rejected draft tokens this way)."""
        for layer in self._layers.values():
            layer.truncate(length)
        if self.padding is not None:
            self.padding.truncate(length)
        self.length = min(self.length, length)

    def hide(self, first: torch.Tensor, stop: int) -> None:
        """Hide columns first[b]..stop-1 of each row b from every later query, as padding is
        hidden: a batch row's rejected draft tokens, when other rows kept theirs."""
        if self.padding is None:
            self.padding = Padding(first.new_ones((first.shape[0], stop), dtype=torch.bool))
        self.padding.hide(first, stop)

    def select_rows(self, rows: torch.Tensor) -> None:
        """Keep only the batch rows `rows` (1-D indices), in every layer application."""
        for layer in self._layers.values():
            if layer.keys is not None and layer.values is not None:
                layer.keys, layer.values = layer.keys[rows], layer.values[rows]
        if self.padding is not None:
            self.padding = self.padding.rows(rows)

    @property
    def num_entries(self) -> int:
        """Layer applications cached so far (n_prelude + depth * n_core + n_coda)."""
        return len(self._layers)


class _LayerRows:
    """One layer application's cache seen by a subset of rows: the new column is written into
    the full cache at those rows (the other rows' slots are left for the caller to fill), and
    attention reads those rows' keys and values."""

    def __init__(
        self, full: LayerCache, rows: torch.Tensor, padding: Padding | None, batch: int
    ) -> None:
        self.full, self.rows, self.padding, self.batch = full, rows, padding, batch
        self.length = full.length

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        full, rows, batch = self.full, self.rows, self.batch
        full.append(k.new_empty((batch, *k.shape[1:])), v.new_empty((batch, *v.shape[1:])))
        assert full.keys is not None and full.values is not None
        full.keys[rows, :, self.length :] = k
        full.values[rows, :, self.length :] = v
        return full.keys[rows], full.values[rows]


class RowSubset:
    """A KVCache of a `batch`-row batch restricted to the rows `rows` (a 1-D index tensor), for
    running some rows through a layer application without computing the others
    (`LayerCaches`)."""

    def __init__(self, cache: KVCache, rows: torch.Tensor, batch: int) -> None:
        self.cache, self.rows, self.batch = cache, rows, batch
        self.padding = None if cache.padding is None else cache.padding.rows(rows)
        self.length = cache.length

    def layer(self, *key: object) -> _LayerRows:
        return _LayerRows(self.cache.layer(*key), self.rows, self.padding, self.batch)

    def positions(self, length: int) -> torch.Tensor | None:
        return None if self.padding is None else self.padding.positions(self.length, length)
