"""Bad input around a transformers looped architecture in a run's [model] (`kind =
"transformers"`): a class without a depth handle, a depth the model cannot run, a transformers
without the architecture, a feature of fixedfirst's own model asked of it (an exit rule, the exit
frontier, a cache strategy, a Hugging Face export), a draft deeper than the verify depth, a depth
beyond what the cache is built for. Part of the bad-input table (tests/bad_input_cases.py,
docs/reference/bad-input.md); each refusal comes before the model runs a forward."""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator

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
        "foreign-exit-rule",
        "transformers model",
        "`generate --exit kl` on a run of Inkling2LoopForCausalLM (an exit rule reads out "
        "between loop passes)",
        ["generate", "inkling-run", "--prompt", "a", "--exit", "kl"],
        "has no readout between its passes: its forward runs every loop pass before the layers "
        "after the loop and the head",
        needs=("inkling-run",),
        skip=SKIP,
    ),
    Case(
        "foreign-frontier",
        "transformers model",
        "`frontier` of a run of Inkling2LoopForCausalLM",
        ["frontier", "inkling-run", "--out", "frontier"],
        "the exit frontier reads the prediction out after every loop pass, and transformers' "
        "Inkling2LoopForCausalLM has no readout between its passes",
        needs=("inkling-run",),
        skip=SKIP,
    ),
    Case(
        "foreign-inspect-rules",
        "transformers model",
        "`inspect --threshold kl=1e-4` on a run of Inkling2LoopForCausalLM",
        ["inspect", "inkling-run", "--prompt", "a", "--threshold", "kl=1e-4", "--out", "p.html"],
        "an exit rule (--threshold, --max-depth) reads the prediction out after every loop pass",
        needs=("inkling-run",),
        skip=SKIP,
    ),
    Case(
        "foreign-serve-depth-cannot-run",
        "transformers model",
        "`generate --depth 2` on an export of an Inkling2Loop model whose loop holds no layer "
        "(`loop_layer_index_end = 1`, its start)",
        ["generate", "noloop-export", "--prompt", "a", "--depth", "2"],
        "Inkling2LoopForCausalLM cannot run depth 2: it loops no layer",
        needs=("noloop-export",),
        skip=SKIP,
    ),
    Case(
        "foreign-draft-too-deep",
        "transformers model",
        "`generate --depth 2 --speculate 3` on an Inkling2Loop run (a draft deeper than the "
        "verify depth)",
        ["generate", "inkling-run", "--prompt", "a", "--depth", "2", "--speculate", "3"],
        "the draft depth must be below the serving depth, got draft depth 3 and serving depth 2",
        needs=("inkling-run",),
        skip=SKIP,
    ),
    Case(
        "foreign-beyond-cache-depth",
        "transformers model",
        "`generate --prefill-depth 4 --decode-depth 2 --cache-depth 3` on an Inkling2Loop run "
        "(a depth beyond what the cache is built for)",
        [
            "generate",
            "inkling-run",
            "--prompt",
            "a",
            "--prefill-depth",
            "4",
            "--decode-depth",
            "2",
            "--cache-depth",
            "3",
        ],
        "depth 4 is beyond the depth 3 the cache is built for (--cache-depth 3)",
        needs=("inkling-run",),
        skip=SKIP,
    ),
    Case(
        "foreign-cache-strategy",
        "transformers model",
        "`generate --cache bounded:2` on an Inkling2Loop run",
        ["generate", "inkling-run", "--prompt", "a", "--cache", "bounded:2"],
        "--cache bounded:2: a cache strategy bounds the core entries of fixedfirst's own looped "
        "transformer",
        needs=("inkling-run",),
        skip=SKIP,
    ),
    Case(
        "foreign-export-hf",
        "transformers model",
        "`export --format hf` of a run of Inkling2LoopForCausalLM",
        ["export", "inkling-run", "--format", "hf", "--out", "hf"],
        "fixedfirst export --format hf is for fixedfirst's own looped transformer; this run's "
        "model is transformers' Inkling2LoopForCausalLM",
        needs=("inkling-run",),
        skip=SKIP,
    ),
]
