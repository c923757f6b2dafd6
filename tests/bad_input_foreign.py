"""Bad input around a transformers looped architecture in a run's [model] (`kind =
"transformers"`): a class without a depth handle, a depth the model cannot run, a transformers
without the architecture, a feature of fixedfirst's own model asked of it (an exit rule, the exit
frontier, a cache strategy, a Hugging Face export), a draft deeper than the verify depth, a depth
beyond what the cache is built for; low-rank adapters (`[train.lowrank]`) asked of our own model,
without peft, on modules the model does not have, or resumed on other base weights. Part of the
bad-input table (tests/bad_input_cases.py, docs/reference/bad-input.md); each refusal comes
before the model runs a forward."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import types
from collections.abc import Iterator
from pathlib import Path

from tests.bad_input_cases import Case
from tests.inkling_helpers import HAS_INKLING, INKLING_TOML

SKIP = None if HAS_INKLING else "needs transformers >= 5.24 (Inkling2LoopForCausalLM)"
HAS_PEFT = importlib.util.find_spec("peft") is not None
SKIP_PEFT = SKIP or (None if HAS_PEFT else "needs peft (the lowrank extra)")
LOWRANK = "\n[train.lowrank]\nrank = 4\n"
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


@contextlib.contextmanager
def without_peft() -> Iterator[None]:
    """A machine without peft: importing it fails."""
    saved = sys.modules.get("peft")
    sys.modules["peft"] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if saved is not None:
            sys.modules["peft"] = saved
        else:
            del sys.modules["peft"]


def lowrank_run(work: Path) -> None:
    """A low-rank run of the tiny Inkling2Loop model, paused after 2 steps."""
    from fixedfirst.config import load_config
    from fixedfirst.train.trainer import Trainer

    (work / "lowrank.toml").write_text(INKLING_TOML + LOWRANK)
    config = load_config(work / "lowrank.toml")
    Trainer(config, work / "lowrank-run", quiet=True).train(stop_after=2)


@contextlib.contextmanager
def other_initialisation() -> Iterator[None]:
    """transformers as a release that initialises Inkling2Loop's routers otherwise has it: the
    same configuration builds other base weights."""
    import torch
    from transformers.models.inkling2_loop import modeling_inkling2_loop as modeling

    cls = modeling.Inkling2LoopPreTrainedModel
    original = cls._init_weights

    def other(self, module):  # type: ignore[no-untyped-def]
        original(self, module)
        if isinstance(module, modeling.Inkling2LoopTopKRouter):
            torch.nn.init.normal_(module.weight, std=0.5)

    cls._init_weights = other  # type: ignore[method-assign]
    try:
        yield
    finally:
        cls._init_weights = original  # type: ignore[method-assign]


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
    Case(
        "foreign-lowrank-own-model",
        "transformers model",
        "`--set train.lowrank.rank=4` (low-rank adapters) for a run of fixedfirst's own looped "
        "transformer",
        ["train", "tiny.toml", *OUT, "--set", "train.lowrank.rank=4"],
        "train.lowrank: low-rank adapters are for a transformers looped architecture",
        needs=("tiny.toml",),
    ),
    Case(
        "foreign-lowrank-without-peft",
        "transformers model",
        "an Inkling2Loop run with [train.lowrank] on a machine without peft (stood in for by a "
        "peft that cannot be imported)",
        ["train", "inkling.toml", *OUT],
        "train.lowrank (low-rank adapters) needs peft >= 0.18.0, which is not installed: pip "
        "install 'fixedfirst[lowrank]'",
        files={"inkling.toml": INKLING_TOML + LOWRANK},
        stand_in=without_peft,
        skip=SKIP,
    ),
    Case(
        "foreign-lowrank-unknown-target",
        "transformers model",
        '`targets = ["q_projj"]` in [train.lowrank] (a module the model does not have)',
        ["train", "inkling.toml", *OUT],
        "train.lowrank.targets: 'q_projj' matches no module of Inkling2LoopForCausalLM",
        files={"inkling.toml": INKLING_TOML + LOWRANK + 'targets = ["q_projj"]\n'},
        skip=SKIP_PEFT,
    ),
    Case(
        "foreign-lowrank-nothing-adapted",
        "transformers model",
        "`targets = []` and `parameters = []` in [train.lowrank]",
        ["train", "inkling.toml", *OUT],
        "train.lowrank: targets and parameters are both empty",
        files={"inkling.toml": INKLING_TOML + LOWRANK + "targets = []\nparameters = []\n"},
        skip=SKIP,
    ),
    Case(
        "foreign-lowrank-other-base",
        "transformers model",
        "`--resume` of a low-rank run on a machine whose transformers initialises Inkling2Loop "
        "otherwise (its routers drawn wider), so the same configuration builds other base "
        "weights",
        ["train", "--out", "lowrank-run", "--resume"],
        "its adapters were trained on other base weights",
        setup=lowrank_run,
        stand_in=other_initialisation,
        skip=SKIP_PEFT,
    ),
]
