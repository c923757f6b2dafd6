"""Key/value cache for incremental decoding, keyed by layer *application*, under a strategy.

Iteration i of a core layer sees another state than iteration j, so entries are keyed by where a
layer is applied: ("prelude", layer), ("core", iteration, layer), ("coda", layer). A strategy
decides how many core entries a token keeps: the full cache one per iteration, `bounded:S` S slots
per core layer (iteration i, 0-based, in slot i mod S), `last` one (docs/design.md §19). The cache
also carries a padded batch's per-row positions and mask (`Padding`), the columns speculation
hides, and the rows adaptive exit still iterates (`RowSubset`). `AttentionCache` and
`LayerCaches` are the two protocols the model asks of a cache (docs/design.md §11, §16).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from fixedfirst.config import ModelConfig
from fixedfirst.errors import UserError


@dataclass(frozen=True)
class FullCache:
    """Every core iteration keeps its own entry: the cache grows linearly with depth."""

    def slot(self, index: int) -> int:
        """Where iteration `index` (0-based) reads and writes its core entries."""
        return index

    def slots(self, depth: int) -> int:
        """Core entries per layer that a token decoded at `depth` keeps."""
        return depth

    def keeps_every_iteration(self, depth: int) -> bool:
        """Whether every iteration up to `depth` has a slot of its own (what depth-speculative
        decoding needs, docs/design.md §19)."""
        return True

    @property
    def name(self) -> str:
        """What `--cache` calls it."""
        return "full"

    def describe(self) -> str:
        return "full cache"


@dataclass(frozen=True)
class BoundedCache:
    """At most `size` core entries per layer whatever the depth: iteration i (0-based) reads and
    writes slot i mod size, so a later token reads, in each slot, the deepest iteration an
    earlier token wrote there. size = 1 is the last-iteration cache."""

    size: int

    def __post_init__(self) -> None:
        size = self.size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise UserError(
                f"a bounded cache keeps S >= 1 slots per core layer, got S = {size!r}; "
                "give --cache bounded:S with S >= 1 (bounded:1 is --cache last)"
            )

    def slot(self, index: int) -> int:
        return index % self.size

    def slots(self, depth: int) -> int:
        return min(depth, self.size)

    def keeps_every_iteration(self, depth: int) -> bool:
        return self.size >= depth

    @property
    def name(self) -> str:
        return "last" if self.size == 1 else f"bounded:{self.size}"

    def describe(self) -> str:
        if self.size == 1:
            return "last-iteration cache"
        return f"bounded cache ({self.size} slots per core layer)"


CacheStrategy = FullCache | BoundedCache
FULL_CACHE = FullCache()
LAST_ITERATION = BoundedCache(1)
CACHE_STRATEGIES = ("full", "bounded:S", "last")
"""What `--cache` accepts."""


def parse_cache_strategy(text: str, flag: str = "--cache") -> CacheStrategy:
    """'full', 'last' or 'bounded:S' (S >= 1), refused in one line naming `flag`."""
    if text == "full":
        return FULL_CACHE
    if text == "last":
        return LAST_ITERATION
    kind, _, size = text.partition(":")
    if kind == "bounded":
        try:
            value = int(size)
        except ValueError:
            raise UserError(
                f"{flag} {text!r}: bounded takes the number of slots, e.g. bounded:4"
            ) from None
        try:
            return BoundedCache(value)
        except UserError as e:
            raise UserError(f"{flag} {text}: {e}") from None
    raise UserError(
        f"{flag} {text!r}: unknown cache strategy; choose one of {', '.join(CACHE_STRATEGIES)}"
    )


def entries_per_token(config: ModelConfig, depth: int, strategy: CacheStrategy) -> int:
    """Layer applications whose keys and values a token keeps when decoded at `depth`."""
    return config.n_prelude + strategy.slots(depth) * config.n_core + config.n_coda


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
    def columns(self) -> int:
        """Columns stored (for a slot of a bounded cache, the current call's included)."""
        return 0 if self.keys is None else self.keys.shape[-2]

    @property
    def length(self) -> int:
        return self.columns

    @property
    def nbytes(self) -> int:
        if self.keys is None or self.values is None:
            return 0
        return self.keys.nbytes + self.values.nbytes

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


class SlotCache(LayerCache):
    """A core layer's slot in a bounded cache, shared by the iterations i with the same i mod S:
    the first of them in a call appends the call's columns, the later ones overwrite them, so
    each position keeps its deepest write and the current call's queries see their own
    iteration's keys."""

    @property
    def length(self) -> int:
        assert self.owner is not None
        return min(self.columns, self.owner.length)

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        assert self.owner is not None
        start = self.owner.length
        if self.columns <= start:  # the call's first write (or a chunk after the session's end)
            return super().append(k, v)
        assert self.keys is not None and self.values is not None
        if self.columns != start + k.shape[-2]:
            raise ValueError(
                f"slot holds {self.columns} columns, the call writes {start}..{start + k.shape[-2]}"
            )
        self.keys[..., start:, :] = k
        self.values[..., start:, :] = v
        return self.keys, self.values


class KVCache:
    """All layer caches of one decoding session (`LayerCaches`), under a cache strategy.

    pad: (B,) leading pad columns per row of a left-padded batch, or None; a batch without
    padding takes the unpadded attention paths (an all-zero `pad` is dropped).
    strategy: which core entries a token keeps (`FullCache`, `BoundedCache`).
    """

    def __init__(
        self,
        pad: torch.Tensor | None = None,
        strategy: CacheStrategy = FULL_CACHE,
        max_depth: int | None = None,
    ) -> None:
        self._layers: dict[tuple, LayerCache] = {}
        self.length = 0
        """Number of columns (padding included) already processed."""
        self.padding = Padding.left(pad) if pad is not None and bool(pad.any()) else None
        self.strategy = strategy
        self.max_depth = max_depth
        """The deepest depth a step may run (None: the first step's depth): every column gets
        an entry in each core slot up to it, whatever depth its own step ran."""

    def build_for(self, depth: int) -> int:
        """The deepest depth this cache serves, refusing a step deeper than it (a cache made
        without one is built for its first step's depth)."""
        if self.max_depth is None:
            self.max_depth = depth
        if depth > self.max_depth:
            raise UserError(
                f"depth {depth} is beyond the depth {self.max_depth} this cache was built for: "
                f"build it for the deepest depth the decoding uses (new_cache(max_depth="
                f"{depth}) in Python; the command line builds it for the deepest depth it is given)"
            )
        return self.max_depth

    def _stored_key(self, key: tuple) -> tuple:
        if key and key[0] == "core":
            return ("core", self.strategy.slot(key[1]), *key[2:])
        return key

    def layer(self, *key: object) -> LayerCache:
        stored = self._stored_key(key)
        if stored not in self._layers:
            shared = stored[0] == "core" and isinstance(self.strategy, BoundedCache)
            self._layers[stored] = SlotCache(self) if shared else LayerCache(self)
        return self._layers[stored]

    def stored(self, *key: object) -> LayerCache | None:
        """The layer application's cache if anything was stored there, else None."""
        return self._layers.get(self._stored_key(key))

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

    def fill_unreached_slots(
        self, depths: torch.Tensor, start: int, max_depth: int, core_layers: int
    ) -> None:
        """Give columns start.. an entry in every core slot up to `max_depth`: a row whose step
        ran d iterations never wrote slot q >= d (the first iteration writing slot q is q + 1,
        under every strategy) and shows there its iteration-d entry, slot d - 1's (docs/design.md
        §1, §19). depths: (B,) the iterations each row ran.

        Per core layer: the rows' own entries are gathered once from the slots they stopped in; a
        slot no row reached takes them whole (one append), a slot some rows reached takes them
        at the rows that stopped before it."""
        slots = self.strategy.slots(max_depth)
        reached = min(int(depths.max()), slots)  # slots 0..reached-1 hold the columns
        shallowest = int(depths.min())
        if shallowest >= slots:
            return
        rows = torch.arange(depths.shape[0], device=depths.device)
        source = (depths - 1).clamp(max=reached - 1)
        for layer_index in range(core_layers):
            written = [self.layer("core", q, layer_index) for q in range(reached)]
            own = []
            for part in ("keys", "values"):
                columns = torch.stack([getattr(w, part)[:, :, start:] for w in written])
                own.append(columns[source, rows])  # (B, H, T, hd): each row's own entries
            for q in range(shallowest, reached):
                target = written[q]
                assert target.keys is not None and target.values is not None
                stopped = depths <= q
                target.keys[stopped, :, start:] = own[0][stopped]
                target.values[stopped, :, start:] = own[1][stopped]
            for q in range(reached, slots):
                target = self.layer("core", q, layer_index)
                keys, values = own
                if target.keys is None:  # its first columns are these tensors: a copy per slot,
                    keys, values = (
                        keys.clone(),
                        values.clone(),
                    )  # a bounded slot is written in place
                target.append(keys, values)

    @property
    def num_entries(self) -> int:
        """Layer applications cached so far (`entries_per_token`)."""
        return len(self._layers)

    @property
    def nbytes(self) -> int:
        """Bytes of every key and value held."""
        return sum(layer.nbytes for layer in self._layers.values())


class _LayerRows:
    """One layer application's cache seen by a subset of rows: the new column is written into
    the full cache at those rows (the other rows' entries are left for the caller to fill, or
    keep an earlier iteration's write to the same slot), and attention reads those rows' keys
    and values."""

    def __init__(
        self,
        full: LayerCache,
        rows: torch.Tensor,
        padding: Padding | None,
        batch: int,
        start: int,
    ) -> None:
        self.full, self.rows, self.padding, self.batch = full, rows, padding, batch
        self.length = start

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        full, rows, batch = self.full, self.rows, self.batch
        if full.columns == self.length:  # the first write of this call: the column appears
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
        return _LayerRows(self.cache.layer(*key), self.rows, self.padding, self.batch, self.length)

    def positions(self, length: int) -> torch.Tensor | None:
        return None if self.padding is None else self.padding.positions(self.length, length)
