"""Bad input around a transformers looped architecture in a run's [model] (`kind =
"transformers"`): a class without a depth handle, a depth the model cannot run, a transformers
without the architecture, a feature of fixedfirst's own model asked of it, a command that serves
only ours. Part of the bad-input table (tests/bad_input_cases.py, docs/reference/bad-input.md);
each refusal comes before the model runs a forward."""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from pathlib import Path

from tests.bad_input_cases import Case
from tests.inkling_helpers import HAS_INKLING, INKLING_TOML

SKIP = None if HAS_INKLING else "needs transformers >= 5.24 (Inkling2LoopForCausalLM)"
OUT = ["--out", "new-run"]


def inkling(old: str = "", new: str = "") -> dict[str, str]:
    """The tiny Inkling2Loop run configuration as `inkling.toml`, with one edit."""
    assert old in INKLING_TOML
    return {"inkling.toml": INKLING_TOML.replace(old, new, 1)}


def with_table_key(line: str) -> dict[str, str]:
    return inkling("[model.transformers]\n", f"[model.transformers]\n{line}\n")


@contextlib.contextmanager
def transformers_5_17() -> Iterator[None]:
    """transformers as a machine with 5.17 has it: a release without the Inkling2Loop models."""
    older = types.ModuleType("transformers")
    older.__version__ = "5.17.0"  # type: ignore[attr-defined]
    saved = sys.modules.get("transformers")
    sys.modules["transformers"] = older
    try:
        yield
    finally:
        if saved is not None:
            sys.modules["transformers"] = saved


def inkling_run_config(work: Path) -> None:
    """A run directory of the tiny Inkling2Loop model, as far as a command reads it first."""
    from fixedfirst.runs.directory import CONFIG_MARK

    (work / "inkling-run").mkdir()
    (work / "inkling-run" / "config.toml").write_text(CONFIG_MARK + INKLING_TOML)


FOREIGN_CASES: list[Case] = [
    Case(
        "foreign-no-depth-handle",
        "transformers model",
        '`[model] kind = "transformers"`, `architecture = "LlamaForCausalLM"` (a model '
        "without loop passes to set)",
        ["compute", "inkling.toml"],
        "transformers' LlamaForCausalLM has no depth handle",
        files=inkling(
            'architecture = "Inkling2LoopForCausalLM"', 'architecture = "LlamaForCausalLM"'
        ),
        skip=SKIP,
    ),
    Case(
        "foreign-architecture-typo",
        "transformers model",
        '`architecture = "Inkling2LoopForCausalLMM"`',
        ["compute", "inkling.toml"],
        "'Inkling2LoopForCausalLMM' is not a looped architecture fixedfirst knows",
        files=inkling('"Inkling2LoopForCausalLM"', '"Inkling2LoopForCausalLMM"'),
        skip=SKIP,
    ),
    Case(
        "foreign-depth-cannot-run",
        "transformers model",
        "an Inkling2Loop model that loops no layer (`loop_layer_index_end = 1`, its start), "
        "trained at depths 1..3",
        ["train", "inkling.toml", *OUT],
        "Inkling2LoopForCausalLM cannot run depth 3: it loops no layer",
        files=inkling("loop_layer_index_end = 2", "loop_layer_index_end = 1"),
        skip=SKIP,
    ),
    Case(
        "foreign-transformers-too-old",
        "transformers model",
        "an Inkling2Loop run on a machine whose transformers is 5.17 (stood in for by a "
        "transformers module without the architecture)",
        ["train", "inkling.toml", *OUT],
        "transformers 5.17.0 has no Inkling2LoopForCausalLM (it came in 5.24.0)",
        files=inkling(),
        stand_in=transformers_5_17,
        skip=SKIP,
    ),
    Case(
        "foreign-grad-depth",
        "transformers model",
        "`--set train.grad_depth=1` (truncated backprop) for an Inkling2Loop run",
        ["train", "inkling.toml", *OUT, "--set", "train.grad_depth=1"],
        "train.grad_depth: truncated backprop is a feature of fixedfirst's own looped",
        files=inkling(),
        skip=SKIP,
    ),
    Case(
        "foreign-state-init",
        "transformers model",
        '`state_init = "zeros"` in the [model] of an Inkling2Loop run',
        ["train", "inkling.toml", *OUT],
        "model.state_init is a key of fixedfirst's own looped transformer",
        files=inkling('kind = "transformers"\n', 'kind = "transformers"\nstate_init = "zeros"\n'),
        skip=SKIP,
    ),
    Case(
        "foreign-compile",
        "transformers model",
        "`--set train.compile=true` for an Inkling2Loop run",
        ["train", "inkling.toml", *OUT, "--set", "train.compile=true"],
        "Inkling2LoopForCausalLM declares it cannot compile as one graph",
        files=inkling(),
        skip=SKIP,
    ),
    Case(
        "foreign-checkpoint-activations",
        "transformers model",
        "`--set train.checkpoint_activations=true` for an Inkling2Loop run",
        ["train", "inkling.toml", *OUT, "--set", "train.checkpoint_activations=true"],
        "activation checkpointing per core iteration is a feature of fixedfirst's own",
        files=inkling(),
        skip=SKIP,
    ),
    Case(
        "foreign-fsdp",
        "transformers model",
        "`--set train.strategy=fsdp` for an Inkling2Loop run",
        ["train", "inkling.toml", *OUT, "--set", "train.strategy=fsdp"],
        "train.strategy = 'fsdp' shards fixedfirst's own looped transformer",
        files=inkling(),
        skip=SKIP,
    ),
    Case(
        "foreign-depth-key",
        "transformers model",
        "`loop_num_passes = 3` in [model.transformers] (the depth is the schedule's)",
        ["compute", "inkling.toml"],
        "model.transformers.loop_num_passes: the depth is the schedule's",
        files=with_table_key("loop_num_passes = 3"),
        skip=SKIP,
    ),
    Case(
        "foreign-unknown-key",
        "transformers model",
        "`hidden_sise = 32` in [model.transformers]",
        ["compute", "inkling.toml"],
        "unknown key model.transformers.hidden_sise; Inkling2LoopTextConfig has no such field "
        "(did you mean hidden_size?)",
        files=with_table_key("hidden_sise = 32"),
        skip=SKIP,
    ),
    Case(
        "foreign-wrong-type",
        "transformers model",
        '`hidden_size = "wide"` in [model.transformers]',
        ["compute", "inkling.toml"],
        "[model.transformers]: TypeError: Field 'hidden_size' expected int, got str",
        files=inkling("hidden_size = 32", 'hidden_size = "wide"'),
        skip=SKIP,
    ),
    Case(
        "foreign-table-without-kind",
        "transformers model",
        "a [model.transformers] table under a [model] without `kind`",
        ["compute", "inkling.toml"],
        "[model.transformers] is the configuration of a transformers architecture: set [model] "
        "kind",
        files=inkling('kind = "transformers"\narchitecture = "Inkling2LoopForCausalLM"\n'),
        skip=SKIP,
    ),
    Case(
        "foreign-generate",
        "transformers model",
        "`generate` on a run of Inkling2LoopForCausalLM (serving, inspection and export are "
        "fixedfirst's own model's)",
        ["generate", "inkling-run", "--prompt", "a"],
        "this command is for fixedfirst's own looped transformer; this run's model is "
        "transformers' Inkling2LoopForCausalLM",
        setup=lambda work: inkling_run_config(work),
        skip=SKIP,
    ),
]
