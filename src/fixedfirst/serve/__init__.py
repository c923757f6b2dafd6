"""Serving a trained looped model: adaptive-depth and depth-speculative generation, batches,
and the tokenizer it needs.

A decoding mode is one typed value (`FixedDepth`, `Speculated`, `Adaptive`, each with its cache
strategy: serve/modes.py) that `decode_steps`, `generate_text` and `generate_batch` take.
`stream_adaptive` decodes with a per-token exit rule (`KLExit`, `EntropyExit`, `StateExit`,
`ArgmaxExit`; `exit_rule(name, ...)`); `generate_batch` decodes prompts of different lengths as
one padded batch; `load_served` opens a run directory or an exported one as a model plus its
tokenizer (exporting a run is `fixedfirst.export`).
"""

from fixedfirst.runs.served import Served, load_served
from fixedfirst.serve.adaptive import (
    AdaptiveStep,
    adaptive_step,
    stream_adaptive,
    stream_kl_exit,
    teacher_forced_exit,
    teacher_forced_kl_exit,
)
from fixedfirst.serve.batching import Completion, generate_batch, left_pad
from fixedfirst.serve.decoding import decode_steps, teacher_forced
from fixedfirst.serve.exit_rules import (
    EXIT_RULES,
    ArgmaxExit,
    EntropyExit,
    ExitRule,
    KLExit,
    StateExit,
    exit_rule,
    kl_divergence,
)
from fixedfirst.serve.generation import generate_text
from fixedfirst.serve.modes import GREEDY, Adaptive, DecodingMode, FixedDepth, Sampling, Speculated
from fixedfirst.serve.scoring import score_pairs

__all__ = [
    "EXIT_RULES",
    "GREEDY",
    "Adaptive",
    "AdaptiveStep",
    "ArgmaxExit",
    "Completion",
    "DecodingMode",
    "EntropyExit",
    "ExitRule",
    "FixedDepth",
    "KLExit",
    "Sampling",
    "Served",
    "Speculated",
    "StateExit",
    "adaptive_step",
    "decode_steps",
    "exit_rule",
    "generate_batch",
    "generate_text",
    "kl_divergence",
    "left_pad",
    "load_served",
    "score_pairs",
    "stream_adaptive",
    "stream_kl_exit",
    "teacher_forced",
    "teacher_forced_exit",
    "teacher_forced_kl_exit",
]
