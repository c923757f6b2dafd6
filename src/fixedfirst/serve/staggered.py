"""Batched exit with the rows staggered: each row of a batch at its own token and iteration.

In lock step (`adaptive_step`) a batch decodes one position per row per step, and the step
iterates until its deepest row stops: at a mean depth d a step costs the batch's largest depth,
and on a CPU, where a small model's step is mostly per-operation overhead, a stopped row saves
almost nothing (docs/design.md §11). Here each step runs one core iteration for every row, each
at its own iteration of its own token; a row that stops reads out its token and starts the next
one at the following step while the others keep iterating. A step costs one iteration (with a
readout for a rule that reads out) of the whole batch, and N tokens at mean depth d take about
N d steps. Every row computes what it computes alone, under the same cache rules (§19): greedy
tokens are lock-step decoding's (tests/test_batching.py holds them to each row alone).

The cache is one preallocated store per layer application, the core's with a slot axis
(slots, B, H, T, hd): row b writes its own column c_b (in the core at slot slot(k_b), k_b its
iteration) and attends through its own mask (its columns up to c_b, none of its padding). When a
row stops at depth d, its iteration-d entry is copied into the slots it did not reach, as
`adaptive_step` does. The prompt but its last token is prefilled at max_depth in lock step.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F

from fixedfirst.model import KVCache, LoopedTransformer, sample_next
from fixedfirst.model.kv_cache import Padding
from fixedfirst.serve.exit_rules import ExitTracker
from fixedfirst.serve.modes import Adaptive


class _RowColumns(Padding):
    """Where each row of a step is: its own position and its mask over the stored columns
    (a `Padding` as attention asks for one, whatever start and length it asks at)."""

    def __init__(self, positions: torch.Tensor, mask: torch.Tensor) -> None:
        self.at, self.visible = positions, mask

    def positions(self, start: int, length: int) -> torch.Tensor:
        return self.at

    def mask(self, start: int, length: int) -> torch.Tensor:
        return self.visible


class _Window:
    """One layer application's store seen by some rows, each at its own column (and, in the
    core, its own slot): an `AttentionCache`."""

    length = 0
    """Unused: positions come from the padding, as in a padded batch."""

    def __init__(self, store, rows, columns, slots, padding: _RowColumns, width: int) -> None:
        self.store, self.rows, self.columns, self.slots = store, rows, columns, slots
        self.padding, self.width = padding, width

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = self.store
        at = (self.rows,) if self.slots is None else (self.slots, self.rows)
        keys[(*at, slice(None), self.columns)] = k[:, :, 0]
        values[(*at, slice(None), self.columns)] = v[:, :, 0]
        return keys[..., : self.width, :][at], values[..., : self.width, :][at]


class _Store:
    """Keys and values of every layer application of one batch, for `width` columns."""

    def __init__(self, model: LoopedTransformer, batch: int, width: int, slots: int, like):
        c = model.config
        shape = (batch, c.n_heads, width, c.d_model // c.n_heads)

        def pair(*lead: int) -> tuple[torch.Tensor, torch.Tensor]:
            return like.new_zeros((*lead, *shape)), like.new_zeros((*lead, *shape))

        self.layers = {("prelude", i): pair() for i in range(c.n_prelude)}
        self.layers |= {("core", i): pair(slots) for i in range(c.n_core)}
        self.layers |= {("coda", i): pair() for i in range(c.n_coda)}
        self.slots = slots

    def take(self, cache: KVCache, columns: int) -> None:
        """The first `columns` columns of every layer application from a lock-step cache."""
        for (kind, i), (keys, values) in self.layers.items():
            for slot in range(self.slots) if kind == "core" else (None,):
                key = (kind, i) if slot is None else ("core", slot, i)
                held = cache.stored(*key)
                assert held is not None and held.keys is not None and held.values is not None
                target = (keys, values) if slot is None else (keys[slot], values[slot])
                target[0][..., :columns, :] = held.keys[..., :columns, :]
                target[1][..., :columns, :] = held.values[..., :columns, :]


class _View:
    """The store for the rows `rows` of one step (`LayerCaches`)."""

    def __init__(self, store: _Store, rows, columns, slots, padding, width: int) -> None:
        self.store, self.rows, self.columns, self.slots = store, rows, columns, slots
        self.padding, self.width = padding, width

    def layer(self, *key: object) -> _Window:
        kind, index = key[0], key[-1]
        slots = self.slots if kind == "core" else None
        store = self.store.layers[(kind, index)]
        return _Window(store, self.rows, self.columns, slots, self.padding, self.width)


def _fill_unreached(store: _Store, rows, columns, depths) -> None:
    """Rows that stopped at depths d < slots show their iteration-d entry in slots d.. (the
    slot of iteration d is d - 1 under every strategy while d <= slots)."""
    short = depths < store.slots
    if not bool(short.any()):
        return
    rows, columns, depths = rows[short], columns[short], depths[short]
    slot = torch.arange(store.slots, device=rows.device)
    slots, which = (slot[:, None] >= depths[None, :]).nonzero(as_tuple=True)
    for (kind, _), (keys, values) in store.layers.items():
        if kind == "core":
            for part in (keys, values):
                own = part[depths - 1, rows, :, columns]  # (R, H, hd)
                part[slots, rows[which], :, columns[which]] = own[which]


def staggers(model: LoopedTransformer, mode: Adaptive) -> bool:
    """Whether the mode's rule can decode a batch staggered: its tracker restarts rows."""
    probe = mode.rule.tracker(torch.zeros(1, model.config.d_model), model.config.vocab_size)
    return type(probe).restart is not ExitTracker.restart


@torch.no_grad()
def stream_staggered(
    model: LoopedTransformer,
    prompt: torch.Tensor,
    max_new_tokens: int,
    mode: Adaptive,
    pad: torch.Tensor | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield (next token (B, 1), depth used for it (B,)) one position at a time, as
    `stream_adaptive` does, the rows decoded staggered; the n-th tokens come once every row has
    decoded its n-th. The prompt is checked by the caller."""
    rule, sampling = mode.rule, mode.sampling
    generator = sampling.generator(prompt.device)
    B, prompt_width = prompt.shape
    device = prompt.device
    pad = torch.zeros(B, dtype=torch.long, device=device) if pad is None else pad.to(device)
    strategy = mode.cache_strategy
    slots = strategy.slots(rule.max_depth)
    like = next(model.parameters())
    store = _Store(model, B, prompt_width + max_new_tokens, slots, like)
    if prompt_width > 1:
        cache = KVCache(pad, strategy)
        model.decode_step(prompt[:, :-1], rule.max_depth, cache)
        store.take(cache, prompt_width - 1)
    tokens = prompt[:, -1].clone()  # the token each row decodes now
    columns = torch.full((B,), prompt_width - 1, dtype=torch.long, device=device)
    done = torch.zeros(B, dtype=torch.long, device=device)  # its iterations so far
    produced = torch.zeros(B, dtype=torch.long, device=device)
    d = model.config.d_model
    state = like.new_empty((B, 1, d))
    injection = like.new_empty((B, 1, d))
    out_tokens = torch.zeros(B, max_new_tokens, dtype=torch.long, device=device)
    out_depths = torch.zeros(B, max_new_tokens, dtype=torch.long, device=device)
    tracker = None
    yielded = 0
    everyone = torch.arange(B, device=device)
    while yielded < max_new_tokens:
        rows = everyone[produced < max_new_tokens]
        width = int(columns[rows].max()) + 1
        visible = torch.arange(width, device=device)
        mask = (visible[None, :] >= pad[:, None]) & (visible[None, :] <= columns[:, None])
        where = _RowColumns((columns - pad)[:, None], mask[:, None, None])

        def view(subset: torch.Tensor) -> _View:
            padding = _RowColumns(where.at[subset], where.visible[subset])
            slot = strategy.slot(done[subset])
            return _View(store, subset, columns[subset], slot, padding, width)

        starting = rows[done[rows] == 0]
        if starting.numel():
            e = model.encode(tokens[starting][:, None], view(starting))
            first = model.initial_state(
                e, 0, deterministic=True, positions=(columns - pad)[starting][:, None]
            )
            state[starting], injection[starting] = first, model.injection(e)
            if tracker is None:  # every row starts at the first step
                tracker = rule.tracker(first[:, -1], model.config.vocab_size)
            else:
                tracker.restart(starting, first[:, -1])
        assert tracker is not None
        step = view(rows)
        active = model.iterate(state[rows], injection[rows], 0, step)
        logprobs = logits = None
        if rule.reads_out:
            logits = model.readout(active, step)[:, -1]
            logprobs = F.log_softmax(logits.float(), dim=-1)
        stop = tracker.update(rows, active[:, -1], logprobs)
        done[rows] += 1
        stop |= done[rows] >= rule.max_depth
        state[rows] = active
        if bool(stop.any()):
            stopping = rows[stop]
            if logits is None:  # read out the stopping rows only
                logits = model.readout(active[stop], view(stopping))[:, -1]
            else:
                logits = logits[stop]
            chosen = sample_next(logits, sampling.temperature, generator)[:, 0]
            _fill_unreached(store, stopping, columns[stopping], done[stopping])
            n = produced[stopping]
            out_tokens[stopping, n], out_depths[stopping, n] = chosen, done[stopping]
            tokens[stopping] = chosen
            columns[stopping] += 1
            done[stopping] = 0
            produced[stopping] += 1
            while yielded < int(produced.min()):
                yield out_tokens[:, yielded : yielded + 1], out_depths[:, yielded]
                yielded += 1
