"""The looped architectures of the transformers library that a run's `[model]` may name.

`[model] kind = "transformers"` trains a model class nobody here wrote with fixedfirst's own
commands (docs/guides/any-loop.md). Such a class is usable only when fixedfirst knows how to set
its depth: `ARCHITECTURES` lists those, with the key of their configuration that holds the number
of loop passes (the depth handle sets it at every step, so a run's table may not) and the keys
that bound the token ids and the sequence length. `checked_options` builds the architecture's
configuration class from the table `[model.transformers]`, refusing in one line what it refuses
(an unknown key, a wrong type, an impossible layout), and returns the table completed with every
default, so that a run's config.toml keeps the configuration it trained with even when a later
transformers release changes a default. transformers is imported only here and only then.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import importlib
import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from fixedfirst.errors import UserError

TABLE = "model.transformers"
"""Where the architecture's configuration keys live."""


@dataclass(frozen=True)
class LoopedArchitecture:
    """A transformers model class whose depth fixedfirst can set."""

    name: str
    """The class, as `transformers` exports it."""
    since: str
    """The first transformers release with it (the floor of the `looped` extra)."""
    depth_key: str
    """The configuration key every forward reads its number of loop passes from."""
    vocab_keys: tuple[str, ...]
    """Keys bounding the token ids (the embedding's rows, the head's columns): the smallest."""
    positions_key: str
    """The key of the longest sequence the model takes."""
    module: str
    """The transformers module that defines the architecture's classes."""
    model_types: tuple[str, ...]
    """The `config.model_type` values of its models (a multimodal model's and its text model's)."""
    text_model: str
    """The class (in `module`) whose configuration each forward reads `depth_key` from; a
    multimodal model holds one inside, whose configuration is its `text_config`."""
    loop_keys: tuple[str, str]
    """The keys of the first looped layer and the layer after the last: [start, end)."""
    no_readout: str
    """Why the architecture has no readout between its loop passes, which the exit rules and the
    exit frontier read after every pass (docs/guides/serving.md, other looped models)."""


ARCHITECTURES = {
    "Inkling2LoopForCausalLM": LoopedArchitecture(
        name="Inkling2LoopForCausalLM",
        since="5.24.0",
        depth_key="loop_num_passes",
        vocab_keys=("vocab_size", "unpadded_vocab_size"),
        positions_key="max_position_embeddings",
        module="transformers.models.inkling2_loop",
        model_types=("inkling2_loop", "inkling2_loop_text"),
        text_model="Inkling2LoopTextModel",
        loop_keys=("loop_layer_index_start", "loop_layer_index_end"),
        no_readout="its forward runs every loop pass before the layers after the loop and the "
        "head, so a pass's prediction exists only as a whole forward at that depth",
    ),
}


OWN_FEATURES: tuple[tuple[str, str], ...] = (
    (
        "every schedule kind, the auto switch (`plateau`, `depth-gap`), token and FLOP budgets "
        "(`train.flops`, a sweep's `flops_of`), snapshots",
        "apply: the compute model is measured (torch's FlopCounterMode at depths 1, 2, 3 at the "
        "training sequence length, fitted; `fixedfirst compute` prints it)",
    ),
    (
        "`eval.depths`, `fixedfirst eval`, a sweep's evaluation, the `depth-gap` probes",
        "apply, one forward per depth (our model scores every depth in one pass of its "
        "recurrence, the one-pass `nll_by_depth`)",
    ),
    (
        "checkpoints, `--resume` (bit-identical), `fixedfirst branch`, DDP (`--nproc`, torchrun)",
        "apply; DDP finds the parameters a step leaves without gradient (Inkling2Loop's "
        "message gates at one pass; its experts are one tensor per layer, used by every step)",
    ),
    (
        '`train.strategy = "fsdp"` (FSDP2)',
        "applies: each layer outside the loop is a unit of its own, the looped layers stay with "
        "the root (they run at every pass); weights gathered in float32, bf16 from autocast",
    ),
    (
        "`train.checkpoint_activations`",
        "applies, through the model's own activation checkpointing (non-reentrant): each "
        "decoder layer, at every pass, keeps its inputs and runs again in the backward",
    ),
    (
        '`train.precision = "bf16"`',
        "applies (autocast); the modules the architecture declares float32 "
        "(`_keep_in_fp32_modules_strict`: Inkling2Loop's routers, convolutions, attention "
        "residuals, message gates' output projections) compute in float32",
    ),
    (
        "`[train.lowrank]` (low-rank adapters, peft)",
        "for transformers architectures only: LoRA on the named modules and expert tensors, the "
        "base frozen; a looped layer's adapters shared by its passes; checkpoints hold the "
        "adapters and the base's SHA-256",
    ),
    ("`train.grad_depth` (truncated backprop)", "refused: full backprop"),
    (
        "`model.state_init` and every other key of the looped transformer's [model]",
        "refused: the architecture's own keys go in [model.transformers]",
    ),
    (
        "`train.compile`",
        "`true` refused: Inkling2Loop declares it cannot compile as one graph; `auto` trains "
        "eagerly",
    ),
    (
        "the memory model: `train.check_memory`, `fixedfirst plan`",
        "`fixedfirst plan --model-config config.json` plans a finish from the configuration "
        "alone (compute/looped_memory.py, fitted at small sizes); a run's own memory check "
        "is not applied (its log says so); `plan CONFIG.toml` plans the run with it, at the "
        "run's batch, sequence length, schedule depths, `[train.lowrank]`, checkpointing and "
        "strategy",
    ),
    (
        "`[model] checkpoint` (start from a checkpoint directory's weights), `fixedfirst "
        "finish`, `eval` of a checkpoint directory, `export --format checkpoint`",
        "apply: the architecture and its table come from the checkpoint's config.json, its "
        "weights' checksum is recorded and checked on resume, the run hands back a checkpoint of "
        "the same class (docs/guides/checkpoints.md)",
    ),
    (
        "`generate` (a fixed depth, `--prefill-depth`/`--decode-depth`, `--speculate`), "
        "`inspect`, `downstream`, `eval --task KIND`, `export`",
        "apply: decoding through the model's own cache, built for the deepest depth a decoding "
        "uses, so that the depth may change between tokens (docs/guides/serving.md, other "
        "looped models)",
    ),
    (
        "the exit rules (`generate --exit`, `inspect --threshold`), `frontier`, "
        "`serving-economics`",
        "refused: Inkling2Loop has no readout between its passes",
    ),
    ("`--cache bounded:S`, `--cache last`", "refused: one cache layer per loop pass"),
    ("`diagnose`, `export --format hf`", "refused: they are fixedfirst's own model's"),
)
"""Which of fixedfirst's own features a run of a transformers architecture has (the
configuration reference prints it; each refusal is one line, config/run.py and
`RunConfig.own_model`)."""


def looped_architecture(name: str) -> LoopedArchitecture:
    """The architecture `name`, or a one-line error: not a class fixedfirst sets the depth of
    (and whether transformers has it at all)."""
    if name in ARCHITECTURES:
        return ARCHITECTURES[name]
    known = ", ".join(ARCHITECTURES)
    installed = importlib.util.find_spec("transformers") is not None
    if installed and hasattr(importlib.import_module("transformers"), name):
        raise UserError(
            f"model.architecture: transformers' {name} has no depth handle: fixedfirst's "
            f"commands train the looped architectures whose depth they can set ({known})"
        )
    raise UserError(
        f"model.architecture: {name!r} is not a looped architecture fixedfirst knows ({known})"
    )


def architecture_of_type(model_type: object) -> LoopedArchitecture | None:
    """The architecture whose models have `config.model_type` = `model_type`, if any."""
    for architecture in ARCHITECTURES.values():
        if model_type in architecture.model_types:
            return architecture
    return None


def architecture_module(architecture: LoopedArchitecture) -> Any:
    """The transformers module of `architecture`, or one line naming the release it needs."""
    try:
        import transformers
    except ImportError:
        raise UserError(
            f"transformers is not installed; {architecture.name} needs transformers >= "
            f"{architecture.since}: pip install 'fixedfirst[looped]'"
        ) from None
    try:
        return importlib.import_module(architecture.module)
    except ImportError:
        raise UserError(
            f"transformers {transformers.__version__} has no {architecture.name} (it came in "
            f"{architecture.since}): pip install 'fixedfirst[looped]'"
        ) from None


def model_class(architecture: LoopedArchitecture) -> Any:
    """The transformers class, or one line naming the release that has it."""
    try:
        import transformers
    except ImportError:
        raise UserError(
            f"model.architecture = {architecture.name!r} needs transformers >= "
            f"{architecture.since}, which is not installed: pip install 'fixedfirst[looped]'"
        ) from None
    try:
        return getattr(transformers, architecture.name)
    except (AttributeError, ImportError):
        raise UserError(
            f"transformers {transformers.__version__} has no {architecture.name} (it came in "
            f"{architecture.since}): pip install 'fixedfirst[looped]'"
        ) from None


def compiles_as_one_graph(name: str) -> bool:
    """Whether the architecture declares that torch.compile can take its forward as one graph
    (transformers' `_can_compile_fullgraph`; Inkling2Loop's is false)."""
    return bool(getattr(model_class(looped_architecture(name)), "_can_compile_fullgraph", False))


def architecture_fields(config_class: type) -> list[str]:
    """The keys of the architecture's own configuration: its class's fields less those every
    transformers configuration has (the library version, output flags, label maps)."""
    from transformers import PreTrainedConfig

    common = {f.name for f in dataclasses.fields(PreTrainedConfig)}
    return [f.name for f in dataclasses.fields(config_class) if f.name not in common]


def build_configuration(architecture: LoopedArchitecture, options: dict[str, Any]) -> Any:
    """The architecture's configuration object from the table's keys (checked as
    `checked_options` checks them)."""
    config_class = model_class(architecture).config_class
    keys = architecture_fields(config_class)
    for key in options:
        if key == architecture.depth_key:
            raise UserError(
                f"{TABLE}.{key}: the depth is the schedule's, set at every step ([schedule], "
                "eval.depths, switch.depth); leave the key out"
            )
        if key not in keys:
            close = difflib.get_close_matches(key, keys, n=1)
            hint = (
                f"did you mean {close[0]}?"
                if close
                else f"its keys: {', '.join(keys[:4])}, ... ({len(keys)} in all)"
            )
            raise UserError(
                f"unknown key {TABLE}.{key}; {config_class.__name__} has no such field ({hint})"
            )
    try:
        with quiet_transformers():
            return config_class(**options)
    except (TypeError, ValueError, refusals()) as e:
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        raise UserError(f"[{TABLE}]: {lines[-1] if lines else type(e).__name__}") from None


def refusals() -> type[Exception]:
    """What a configuration class raises for a value it refuses, besides TypeError and
    ValueError: huggingface_hub's strict dataclasses' validation errors."""
    from huggingface_hub.errors import StrictDataclassError

    return StrictDataclassError


def checked_options(architecture: LoopedArchitecture, options: dict[str, Any]) -> dict[str, Any]:
    """The table checked by the architecture's configuration class and completed with its
    defaults: every key with a value TOML can hold (unset ones, None, are left out), the depth
    key aside."""
    config = build_configuration(architecture, options)
    complete = {}
    for key in architecture_fields(type(config)):
        value = getattr(config, key)
        if key != architecture.depth_key and value is not None:
            complete[key] = list(value) if isinstance(value, tuple) else value
    return complete


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' warnings and progress bars off while it checks a configuration or loads a
    checkpoint: a small test model's unused defaults (an end-of-text id beyond a tiny
    vocabulary) warn on every load, and a refusal after a bar would not be one line."""
    from transformers.utils import logging

    level = logging.get_verbosity()
    bars = logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(level)
        if bars:
            logging.enable_progress_bar()
