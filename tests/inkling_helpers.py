"""A tiny transformers Inkling2LoopForCausalLM (hidden 32, four experts, one looped layer between
two plain ones) and a counter of the loop passes each of its forwards actually runs."""

from __future__ import annotations

import importlib.util

import pytest
import torch


def has_inkling() -> bool:
    try:
        return importlib.util.find_spec("transformers.models.inkling2_loop") is not None
    except ImportError:  # no transformers at all, or one that cannot tell
        return False


HAS_INKLING = has_inkling()
needs_inkling = pytest.mark.skipif(
    not HAS_INKLING, reason="this transformers has no Inkling2Loop models (5.24 or later does)"
)

VOCAB = 64
TINY = {
    "vocab_size": VOCAB,
    "unpadded_vocab_size": VOCAB,
    "hidden_size": 32,
    "num_hidden_layers": 3,
    "layer_types": ["hybrid_sliding", "hybrid", "hybrid_sliding"],
    "n_layers_per_attn_res_block": 1,
    "loop_layer_index_start": 1,
    "loop_layer_index_end": 2,
    "loop_num_passes": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "swa_num_attention_heads": 2,
    "swa_num_key_value_heads": 1,
    "swa_head_dim": 16,
    "sliding_window_size": 16,
    "d_rel": 4,
    "rel_extent": 16,
    "moe_intermediate_size": 16,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "loop_gate_rank": 4,
    "max_position_embeddings": 64,
    "eos_token_id": None,
    "use_cache": False,
}


def tiny_inkling(seed: int = 0):
    from transformers import Inkling2LoopForCausalLM
    from transformers.models.inkling2_loop import Inkling2LoopTextConfig

    torch.manual_seed(seed)
    return Inkling2LoopForCausalLM(Inkling2LoopTextConfig(**TINY))


class PassCounter:
    """The loop passes each forward of an Inkling2Loop model ran, counted as calls of its first
    looped layer between the start and the end of the text model's forward (`passes`, one entry
    per forward). Hooks on the instance, or on the classes (`on_classes`) for models built where
    the test cannot reach them."""

    def __init__(self) -> None:
        self.passes: list[int] = []
        self.calls = 0

    def start(self, *args, **kwargs) -> None:
        self.calls = 0

    def count(self, *args, **kwargs) -> None:
        self.calls += 1

    def end(self, *args, **kwargs) -> None:
        self.passes.append(self.calls)

    def attach(self, model) -> PassCounter:
        text = model.model
        first_looped = text.layers[text.config.loop_layer_index_start]
        text.register_forward_pre_hook(self.start)
        first_looped.register_forward_pre_hook(self.count)
        text.register_forward_hook(self.end)
        return self


def batches(rows: int, length: int, seed: int) -> torch.Tensor:
    """A learnable token stream: each row counts up from a random start (mod VOCAB)."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, VOCAB, (rows, 1), generator=g)
    return (start + torch.arange(length)) % VOCAB


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return repr(value)


TINY_TABLE = "\n".join(
    f"{key} = {toml_value(value)}"
    for key, value in TINY.items()
    if value is not None and key != "loop_num_passes"  # the depth is the schedule's
)
"""TINY as the table [model.transformers] of a run configuration."""

INKLING_TOML = f"""
[model]
kind = "transformers"
architecture = "Inkling2LoopForCausalLM"

[model.transformers]
{TINY_TABLE}

[schedule]
kind = "fixed-first"
k0 = 1
switch = 0.5
k_max = 3

[train]
tokens = 1280
batch_size = 8
micro_batch_size = 4
seq_len = 16
lr = 3e-3
warmup = 0.1
log_every = 1
checkpoint_every = 4
keep_checkpoints = 2
device = "cpu"

[eval]
depths = [1, 2, 3]
batches = 1
"""
"""fixedfirst's own commands on TINY: 10 steps of 8 sequences of 16 tokens, one pass for the
first 5, then 1 to 3 passes; the synthetic data's vocabulary is the model's (64)."""


def inkling_text_toml(data: str) -> str:
    """The tiny Inkling2Loop on byte-level token data at `data` (257 ids: the byte tokenizer's),
    a window of 64: fixed-first 1 pass, then 1 to 4; 8 steps of 8 sequences of 32 bytes. Drawn
    at 5 times transformers' initial scale, so that its passes differ after so short a run (at
    the default, 8 steps leave every depth's greedy tokens the same)."""
    table = TINY_TABLE.replace(f"vocab_size = {VOCAB}", "vocab_size = 257")
    table += "\ninitializer_range = 0.1"
    return f"""
[model]
kind = "transformers"
architecture = "Inkling2LoopForCausalLM"

[model.transformers]
{table}

[schedule]
kind = "fixed-first"
k0 = 1
switch = 0.5
k_max = 4

[train]
tokens = 2048
batch_size = 8
seq_len = 32
lr = 3e-3
log_every = 4

[data]
kind = "tokens"
path = "{data}"

[eval]
depths = [1, 4]
batches = 1
"""
