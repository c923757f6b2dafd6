"""Serving a trained looped model: adaptive-depth generation, export, and the tokenizer it needs.

`stream_kl_exit` decodes with the per-token KL exit rule (`KLExit`); `load_served` opens a run
directory or an exported one as a model plus its tokenizer; `export_run` writes a run's weights,
configuration and tokenizer into a directory that `fixedfirst.load` restores for inference;
`serve.hf` writes the same checkpoint as a Hugging Face transformers model (`--format hf`).
"""

from fixedfirst.serve.adaptive import (
    AdaptiveStep,
    KLExit,
    adaptive_step,
    kl_divergence,
    stream_kl_exit,
    teacher_forced_kl_exit,
)
from fixedfirst.serve.export import export_run
from fixedfirst.serve.exported import load
from fixedfirst.serve.generation import generate_text
from fixedfirst.serve.loading import Served, load_served
from fixedfirst.serve.scoring import score_pairs

__all__ = [
    "AdaptiveStep",
    "KLExit",
    "Served",
    "adaptive_step",
    "export_run",
    "generate_text",
    "kl_divergence",
    "load",
    "load_served",
    "score_pairs",
    "stream_kl_exit",
    "teacher_forced_kl_exit",
]
