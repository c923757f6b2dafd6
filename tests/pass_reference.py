"""A reference without a cache for decoding a transformers Inkling2Loop model at per-token depths
(model/pass_cache.py's rule: a token decoded at depth d shows a later token's pass j > d its
pass-d entries).

ONE forward of the whole sequence without a cache (`use_cache=False`: transformers' own masks,
full-sequence attention and padded convolutions), at the deepest depth asked for, with hooks on
the looped layers: at pass p, every quantity of a row s with depth d_s < p that anything else
reads is replaced by its pass-d_s value from the same forward: the inputs of the key and value
short convolutions, the keys and values, the inputs of the post-attention and post-MLP short
convolutions (what later rows read), and the layer's output (what the next layer, the next pass's
messages, the block states and the layers after the loop read of the row). So row s leaves the
loop with its pass-d_s state and every later row reads its pass-d_s entries, as the rule says,
and its logits are those at depth d_s. Nothing of the cache code under test is used.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


class PassRule:
    """The hooks of one reference forward: quantities recorded by (layer, name, pass)."""

    def __init__(self, depths: Sequence[int]) -> None:
        self.depths = torch.tensor(list(depths))
        self.recorded: dict[tuple, torch.Tensor] = {}
        self.passes: dict[int, int] = {}

    def substitute(self, key: tuple, value: torch.Tensor, axis: int, layer: int) -> torch.Tensor:
        depth = self.passes[layer]
        self.recorded[(*key, depth)] = value.detach().clone()
        shallower = (self.depths < depth).nonzero()[:, 0].tolist()
        if not shallower:
            return value
        value = value.clone()
        for row in shallower:
            index: list = [slice(None)] * value.dim()
            index[axis] = row
            value[tuple(index)] = self.recorded[(*key, int(self.depths[row]))][tuple(index)]
        return value

    def attach(self, text_model, start: int, end: int) -> list:
        handles = []
        for layer in range(start, end):
            module = text_model.layers[layer]
            attention = module.self_attn

            def count(mod, args, layer=layer):
                self.passes[layer] = self.passes.get(layer, 0) + 1

            handles.append(module.register_forward_pre_hook(count))
            outputs = (
                ("key input", attention.k_proj.linear, 1),
                ("value input", attention.v_proj.linear, 1),
                ("keys", attention.k_proj, 2),
                ("values", attention.v_proj, 2),
                ("output", module, 1),
            )
            for name, part, axis in outputs:

                def replace(mod, args, out, name=name, axis=axis, layer=layer):
                    return self.substitute((layer, name), out, axis, layer)

                handles.append(part.register_forward_hook(replace))
            for name, part in (
                ("post-attention input", module.post_attention_convolution),
                ("post-mlp input", module.post_mlp_convolution),
            ):

                def replace_input(mod, args, kwargs, name=name, layer=layer):
                    first = self.substitute((layer, name), args[0], 1, layer)
                    return (first, *args[1:]), kwargs

                handles.append(part.register_forward_pre_hook(replace_input, with_kwargs=True))
        return handles


@torch.no_grad()
def logits_at_depths(network, tokens: torch.Tensor, depths: Sequence[int]) -> torch.Tensor:
    """Logits (1, T, V) of `tokens` (1, T) when position t is decoded at depths[t] and later
    positions read its entries as the rule says (module docstring)."""
    assert tokens.shape == (1, len(depths))
    config = network.config
    text_model = network.model
    rule = PassRule(depths)
    handles = rule.attach(text_model, config.loop_layer_index_start, config.loop_layer_index_end)
    saved = config.loop_num_passes
    try:
        config.loop_num_passes = max(depths)
        return network(input_ids=tokens, use_cache=False).logits
    finally:
        config.loop_num_passes = saved
        for handle in handles:
            handle.remove()


def scrambled_inkling(seed: int = 0, scale: float = 0.3):
    """The tiny Inkling2Loop of tests/inkling_helpers.py with every parameter drawn N(0, scale):
    transformers initialises the message gates' queries and several scales to zero, which
    makes the passes nearly alike; drawn anew, each pass differs, so a wrong pass shows."""
    from tests.inkling_helpers import tiny_inkling

    network = tiny_inkling(seed).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in network.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * scale)
    return network
