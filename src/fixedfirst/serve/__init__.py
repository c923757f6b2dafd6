"""Serving a trained looped model: adaptive-depth generation, export, and the tokenizer it needs.

`stream_kl_exit` decodes with the per-token KL exit rule (`KLExit`); `load_served` opens a run
directory or an exported one as a model plus its tokenizer; `export_run` writes a run's weights,
configuration and tokenizer into a directory that `fixedfirst.load` restores for inference.
"""

from fixedfirst.serve.adaptive import (
    AdaptiveStep,
    KLExit,
    adaptive_step,
    kl_divergence,
    stream_kl_exit,
    teacher_forced_kl_exit,
)

__all__ = [
    "AdaptiveStep",
    "KLExit",
    "adaptive_step",
    "kl_divergence",
    "stream_kl_exit",
    "teacher_forced_kl_exit",
]
