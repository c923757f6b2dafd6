"""The cache of a transformers looped model, built for the deepest depth a decoding may use, so
that the depth may change between tokens without recomputing the prompt (docs/design.md §19).

transformers' Inkling2Loop keeps one cache layer per layer application: the model's layers, then
a copy of the looped layers' caches for each pass after the first, appended by the first forward
for the passes *it* runs. A cache filled at 2 passes therefore fails at 3 (an IndexError: the
third pass's layers were never made), and one filled at 3 and continued at 2 leaves the third
pass's layers a token short. `PassCache` appends the copies for `max_depth` passes before the
first forward (the model then appends nothing) and, after each step at depth d < max_depth,
applies one rule to the passes the step did not run:

    a token decoded at depth d shows a later token's pass j > d its pass-d entries

(keys, values and the short convolutions' inputs of every looped layer), the rule our own model
follows for a token that stopped iterating early (docs/design.md §1, §19). A reference without a
cache that applies the same rule (tests/pass_reference.py) gives the same logits.

Left-padded batches carry a 2-D attention mask and per-row positions, as transformers'
`generate` passes them. A cache built with `rollback=True` records the convolutions' past so that
`truncate` can remove the last columns (depth-speculative decoding rolls back rejected drafts).
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from fixedfirst.errors import UserError


class PassCache:
    """A transformers `DynamicCache` with every pass's layers up to `max_depth`, and the columns
    (tokens, padding included) it holds."""

    def __init__(
        self,
        text_config: Any,
        loop_keys: tuple[str, str],
        max_depth: int,
        pad: torch.Tensor | None = None,
        rollback: bool = False,
    ) -> None:
        from transformers import DynamicCache

        self.max_depth = max_depth
        self.start = int(getattr(text_config, loop_keys[0]))
        self.end = int(getattr(text_config, loop_keys[1]))
        self.layer_count = int(text_config.num_hidden_layers)
        self.transformers_cache = DynamicCache(config=text_config)
        layers = self.transformers_cache.layers
        if len(layers) != self.layer_count:
            raise ValueError(
                f"expected one cache layer per model layer ({self.layer_count}), got {len(layers)}"
            )
        looped = layers[self.start : self.end]
        layers += [copy.deepcopy(layer) for _ in range(max_depth - 1) for layer in looped]
        self.rollback = rollback
        if rollback:
            self.transformers_cache.activate_past_recording()
        self.length = 0
        """Columns held (padding included)."""
        self.valid = None if pad is None or not bool(pad.any()) else _left_valid(pad)
        """(B, columns) False at a left-padded row's pad columns; None without padding."""

    def layer_index(self, depth: int, layer: int) -> int:
        """Where pass `depth` (1-based) of looped layer `layer` keeps its cache: the model's own
        layer for the first pass, the appended copies for the others (Inkling2Loop's layout)."""
        if depth == 1:
            return layer
        return self.layer_count + (depth - 2) * (self.end - self.start) + layer - self.start

    def check_depth(self, depth: int) -> None:
        if depth > self.max_depth:
            raise UserError(
                f"depth {depth} is beyond the {self.max_depth} passes this cache was built for: "
                f"build it for the deepest depth the decoding uses (new_cache(max_depth="
                f"{depth}) in Python; the command line builds it for the deepest depth it is given)"
            )

    def inputs(self, columns: int) -> dict[str, torch.Tensor]:
        """The mask and positions of the next `columns` columns, for a padded batch ({})."""
        if self.valid is None:
            return {}
        width = self.length + columns
        valid = self.valid
        if valid.shape[1] < width:
            more = valid.new_ones((valid.shape[0], width - valid.shape[1]))
            self.valid = valid = torch.cat([valid, more], 1)
        mask = valid[:, :width].long()
        positions = (mask.cumsum(1) - 1).clamp(min=0)[:, self.length : width]
        return {"attention_mask": mask, "position_ids": positions}

    def carry_forward(self, depth: int, columns: int) -> None:
        """After a step of `columns` columns at `depth`: give every pass j > depth the step's
        pass-`depth` entries (the rule above), so a later, deeper token finds them."""
        if depth >= self.max_depth:
            return
        layers = self.transformers_cache.layers
        for looped in range(self.start, self.end):
            source = layers[self.layer_index(depth, looped)]
            for deeper in range(depth + 1, self.max_depth + 1):
                _copy_columns(source, layers[self.layer_index(deeper, looped)], columns)

    @torch.inference_mode()  # the steps fill the cache in inference mode (decode_step)
    def truncate(self, length: int) -> None:
        """Forget every column from `length` on; at the current length, trim what rollback
        recorded back to what the next step needs (a cache built with rollback=True)."""
        if length > self.length or (length == self.length and not self.rollback):
            return
        if not self.rollback:
            raise ValueError("this cache was built without rollback=True")
        self.transformers_cache.crop(length - self.length)
        self.length = length
        if self.valid is not None:
            self.valid = self.valid[:, :length]


def _left_valid(pad: torch.Tensor) -> torch.Tensor:
    columns = torch.arange(int(pad.max()), device=pad.device)
    return columns[None, :] >= pad[:, None]


def _copy_columns(source: Any, target: Any, columns: int) -> None:
    """Append to cache layer `target` the last `columns` columns that `source` took in (keys,
    values, each short convolution's inputs), through the layers' own update methods; their
    token counters then equal the source's."""
    kept = min(columns, source.keys.shape[-2])  # a sliding window keeps its last columns only
    target.update(source.keys[..., -kept:, :], source.values[..., -kept:, :])
    for index in range(source.number_of_states):
        state = source.conv_states[index]
        if state is None:
            continue
        width = min(columns, state.shape[-1])  # without rollback a state keeps its kernel only
        target.update_conv_state(
            state[..., -width:], state_idx=index, conv_kernel_size=source.conv_kernel_size[index]
        )
    if hasattr(source, "cumulative_length"):
        target.cumulative_length = source.cumulative_length
    target.cumulative_length_linear = source.cumulative_length_linear.clone()
