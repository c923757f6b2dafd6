"""The bios task (docs/design.md §5): fictional people, their biographies, and how much a model
recalls of them.

`build_world(options, seed)` makes the people and their facts (`[data.bios]`, seeded by
data.seed); `BiosSource.from_config` serves training batches (`[data] kind = "bios"`);
`evaluate_recall(model, world, depths)` returns a `RecallReport` whose `bits()` maps each serving
depth to recalled bits per person. `experiment.py` is the Figure 1 experiment (`fixedfirst bios`).
"""

from fixedfirst.tasks.bios.recall import (
    DepthRecall,
    RecallReport,
    build_prompts,
    evaluate_recall,
    exact_match,
    recalled_bits,
    recalled_facts,
)
from fixedfirst.tasks.bios.source import BiosSource, bios_seq_len, bios_vocab_size
from fixedfirst.tasks.bios.templates import TEMPLATES, render
from fixedfirst.tasks.bios.tokenizer import BiosTokenizer
from fixedfirst.tasks.bios.world import (
    ATTRIBUTES,
    BiosOptions,
    World,
    build_pools,
    build_world,
)

__all__ = [
    "ATTRIBUTES",
    "TEMPLATES",
    "BiosOptions",
    "BiosSource",
    "BiosTokenizer",
    "DepthRecall",
    "RecallReport",
    "World",
    "bios_seq_len",
    "bios_vocab_size",
    "build_pools",
    "build_prompts",
    "build_world",
    "evaluate_recall",
    "exact_match",
    "recalled_bits",
    "recalled_facts",
    "render",
]
