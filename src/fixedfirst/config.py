"""Run configuration: TOML sections loaded into validated dataclasses.

A run is described by one TOML file with the sections `[model]`, `[schedule]`, `[train]`, `[data]`
and `[eval]`; every command also takes `--set section.key=value` overrides. Loading checks three
things and names the offending key in a one-line `UserError` when one fails:

1. the key exists (a typo must not silently fall back to a default),
2. the value has the field's type (an int where an int is due, a finite float, one of the choices),
3. the value is possible (d_model divisible by n_heads, depth >= 1, switch in [0, 1], ...).

Field docstrings are the configuration reference; `fixedfirst config-reference` prints them.
"""

from __future__ import annotations

import itertools
import math
import sys
import types
import typing
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Literal, Union

from fixedfirst.errors import UserError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _require(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise UserError(f"{key}: {message}")


@dataclass
class ModelConfig:
    """The looped transformer's shape (DESIGN.md §3)."""

    SECTION: ClassVar[str] = "model"

    vocab_size: int = 256
    """Vocabulary size (rows of the embedding, columns of the head)."""
    d_model: int = 128
    """Width of the residual stream and of the recurrent state."""
    n_heads: int = 4
    """Attention heads per layer; must divide d_model."""
    n_prelude: int = 1
    """Untied layers before the recurrence (may be 0)."""
    n_core: int = 2
    """Layers in the shared core block, applied `depth` times."""
    n_coda: int = 1
    """Untied layers after the recurrence (may be 0)."""
    max_seq_len: int = 256
    """Longest sequence the rotary tables (and the generation cache) cover."""
    d_ff: int | None = None
    """MLP hidden width; default 4*d_model for gelu, 8/3*d_model rounded up to 64 for swiglu."""
    mlp: Literal["swiglu", "gelu"] = "swiglu"
    """MLP kind."""
    norm: Literal["pre", "sandwich"] = "pre"
    """`pre`: pre-norm blocks. `sandwich`: also normalise after each residual sum (Huginn), which
    keeps the recurrent state bounded at large depth."""
    injection: Literal["concat", "add"] = "concat"
    """How the prelude output enters every iteration: `concat` = Linear(2d, d)(state ++ input)
    (Huginn, McLeish), `add` = state + input."""
    state_init: Literal["normal", "zeros"] = "normal"
    """Initial recurrent state. `normal`: truncated normal, std sqrt(2/(5d)), redrawn every training
    forward; evaluation uses a fixed per-position draw from `eval_seed`. `zeros`: always zeros."""
    eval_seed: int = 0
    """Seed of the fixed initial state used in evaluation and generation (state_init = normal)."""
    tie_embeddings: bool = False
    """Share the embedding matrix with the output head."""
    rope_base: float = 10000.0
    """Rotary position embedding base."""

    def __post_init__(self) -> None:
        s = self.SECTION
        _require(self.vocab_size >= 2, f"{s}.vocab_size", f"must be >= 2, got {self.vocab_size}")
        _require(self.d_model >= 2, f"{s}.d_model", f"must be >= 2, got {self.d_model}")
        _require(self.n_heads >= 1, f"{s}.n_heads", f"must be >= 1, got {self.n_heads}")
        _require(
            self.d_model % self.n_heads == 0,
            f"{s}.d_model",
            f"{self.d_model} is not divisible by n_heads = {self.n_heads}",
        )
        _require(
            (self.d_model // self.n_heads) % 2 == 0,
            f"{s}.n_heads",
            f"head size d_model/n_heads = {self.d_model // self.n_heads} must be even (rotary)",
        )
        _require(self.n_prelude >= 0, f"{s}.n_prelude", f"must be >= 0, got {self.n_prelude}")
        _require(self.n_core >= 1, f"{s}.n_core", f"must be >= 1, got {self.n_core}")
        _require(self.n_coda >= 0, f"{s}.n_coda", f"must be >= 0, got {self.n_coda}")
        _require(self.max_seq_len >= 1, f"{s}.max_seq_len", "must be >= 1")
        _require(self.d_ff is None or self.d_ff >= 1, f"{s}.d_ff", "must be >= 1")
        _require(self.rope_base > 1, f"{s}.rope_base", "must be > 1")

    @property
    def hidden_size(self) -> int:
        """The MLP hidden width actually used."""
        if self.d_ff is not None:
            return self.d_ff
        if self.mlp == "gelu":
            return 4 * self.d_model
        return 64 * math.ceil(8 * self.d_model / 3 / 64)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


@dataclass
class ScheduleConfig:
    """Which training depth each optimizer step uses (DESIGN.md §4)."""

    SECTION: ClassVar[str] = "schedule"

    kind: Literal["fixed", "uniform", "poisson-lognormal", "progressive", "fixed-first"] = (
        "fixed-first"
    )
    """Schedule kind."""
    depth: int = 4
    """`fixed`: the depth of every step."""
    k0: int = 2
    """`fixed-first`: the depth before the switch."""
    switch: float = 0.67
    """`fixed-first`: fraction of the token budget trained at k0."""
    finish: Literal["uniform", "poisson-lognormal"] = "uniform"
    """`fixed-first`: the distribution after the switch."""
    k_min: int = 1
    """Smallest depth of `uniform` (and of a uniform finish)."""
    k_max: int = 16
    """Largest depth of `uniform`; also the clip of every Poisson-lognormal draw."""
    mean: float | None = None
    """Mean depth E[K] of `poisson-lognormal` (and its finish), the true mean after the clip at
    k_max (the pre-clip rate is solved for); `progressive` ramps up to it.
    Default: (k_min + k_max) / 2, the uniform schedule's mean, so the two cost the same."""
    sigma: float = 0.5
    """Log-normal sigma of the Poisson rate."""
    warmup: float = 0.25
    """`progressive`: fraction of the steps over which the mean ramps from 1 to `mean`."""
    ramp: Literal["linear", "sqrt"] = "sqrt"
    """`progressive`: ramp shape f(x) = x (`linear`) or 1 - sqrt(1 - x) (`sqrt`)."""

    def __post_init__(self) -> None:
        s = self.SECTION
        _require(self.depth >= 1, f"{s}.depth", f"must be >= 1, got {self.depth}")
        _require(self.k0 >= 1, f"{s}.k0", f"must be >= 1, got {self.k0}")
        _require(self.k_min >= 1, f"{s}.k_min", f"must be >= 1, got {self.k_min}")
        _require(
            self.k_max >= self.k_min,
            f"{s}.k_max",
            f"{self.k_max} is below k_min = {self.k_min}",
        )
        _require(0.0 <= self.switch <= 1.0, f"{s}.switch", f"must be in [0, 1], got {self.switch}")
        if self.kind == "fixed-first":
            _require(
                self.k0 <= self.k_max,
                f"{s}.k0",
                f"{self.k0} exceeds k_max = {self.k_max}; lower k0 or raise k_max",
            )
        _require(self.sigma > 0, f"{s}.sigma", f"must be > 0, got {self.sigma}")
        _require(0.0 < self.warmup <= 1.0, f"{s}.warmup", f"must be in (0, 1], got {self.warmup}")
        if self.mean is not None:
            _require(
                self.mean == 1.0 or 1.0 < self.mean < self.k_max,
                f"{s}.mean",
                f"must be 1 or strictly between 1 and k_max = {self.k_max} (it is the mean "
                f"depth after the clip at k_max), got {self.mean}",
            )
        if self.kind in ("poisson-lognormal", "progressive") or self.finish == "poisson-lognormal":
            _require(
                self.mean_depth == 1.0 or self.mean_depth < self.k_max,
                f"{s}.k_max",
                f"k_max = {self.k_max} leaves no room for a Poisson-lognormal mean depth of "
                f"{self.mean_depth:g}; raise k_max or set schedule.mean",
            )

    @property
    def mean_depth(self) -> float:
        """The Poisson-lognormal mean in use (explicit, or the uniform range's midpoint)."""
        return self.mean if self.mean is not None else (self.k_min + self.k_max) / 2


@dataclass
class TrainConfig:
    """Optimisation, budgets, device and checkpointing."""

    SECTION: ClassVar[str] = "train"

    seed: int = 0
    """Seed of the model init, the data order and the depth schedule."""
    tokens: int = 1_000_000
    """Token budget; the schedule's switch is a fraction of it. Ignored when `flops` is set."""
    flops: float | None = None
    """Modeled training-FLOP budget. When set, the token budget is planned from the schedule's
    expected cost so that runs with different schedules spend the same FLOPs."""
    batch_size: int = 16
    """Sequences per optimizer step (global, over all ranks and micro-batches)."""
    micro_batch_size: int | None = None
    """Sequences per forward/backward; batch_size / micro_batch_size steps are accumulated."""
    seq_len: int = 128
    """Training sequence length (<= model.max_seq_len)."""
    lr: float = 1e-3
    """Peak learning rate."""
    final_lr_fraction: float = 0.1
    """Learning rate at the end, as a fraction of `lr`."""
    lr_schedule: Literal["cosine", "wsd"] = "cosine"
    """`cosine`: warmup then cosine decay. `wsd`: warmup, constant, then linear decay."""
    warmup: float = 0.05
    """Fraction of the steps spent in linear warmup."""
    decay: float = 0.2
    """`wsd`: fraction of the steps spent in the final decay."""
    weight_decay: float = 0.1
    """AdamW weight decay, applied to matrices only (not norms)."""
    beta1: float = 0.9
    """AdamW beta1."""
    beta2: float = 0.95
    """AdamW beta2."""
    grad_clip: float = 1.0
    """Gradient-norm clip (0 disables)."""
    grad_depth: int | None = None
    """Truncated backprop: gradients through the last `grad_depth` core iterations only.
    Default: full backprop."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where to train; `auto` takes CUDA when present."""
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """`auto`: bf16 autocast on CUDA, fp32 on CPU."""
    compile: bool = False
    """torch.compile each block; the depth loop stays in Python, so a new depth never recompiles."""
    strategy: Literal["ddp", "fsdp"] = "ddp"
    """Multi-process strategy under torchrun."""
    log_every: int = 10
    """Steps between metric lines."""
    checkpoint_every: int = 0
    """Steps between checkpoints (0: only at the switch and at the end)."""
    keep_checkpoints: int = 3
    """Periodic checkpoints kept (the switch checkpoint and snapshots are always kept)."""
    snapshots: list[float] = field(default_factory=list)
    """Fractions of the run's modeled FLOP budget at which a checkpoint is kept for later
    evaluation, e.g. [0.15, 0.45] (the end of the run is always checkpointed)."""

    def __post_init__(self) -> None:
        s = self.SECTION
        _require(self.tokens > 0, f"{s}.tokens", f"the token budget must be > 0, got {self.tokens}")
        if self.flops is not None:
            _require(self.flops > 0, f"{s}.flops", f"the FLOP budget must be > 0, got {self.flops}")
        _require(self.batch_size >= 1, f"{s}.batch_size", f"must be >= 1, got {self.batch_size}")
        if self.micro_batch_size is not None:
            _require(
                self.micro_batch_size >= 1 and self.batch_size % self.micro_batch_size == 0,
                f"{s}.micro_batch_size",
                f"{self.micro_batch_size} must be >= 1 and divide batch_size = {self.batch_size}",
            )
        _require(self.seq_len >= 2, f"{s}.seq_len", f"must be >= 2, got {self.seq_len}")
        _require(self.lr > 0, f"{s}.lr", f"must be > 0, got {self.lr}")
        _require(
            0.0 <= self.final_lr_fraction <= 1.0,
            f"{s}.final_lr_fraction",
            f"must be in [0, 1], got {self.final_lr_fraction}",
        )
        _require(0.0 <= self.warmup < 1.0, f"{s}.warmup", f"must be in [0, 1), got {self.warmup}")
        _require(0.0 <= self.decay <= 1.0, f"{s}.decay", f"must be in [0, 1], got {self.decay}")
        _require(
            self.lr_schedule != "wsd" or self.warmup + self.decay <= 1.0,
            f"{s}.decay",
            f"warmup + decay = {self.warmup + self.decay} exceeds 1",
        )
        _require(self.weight_decay >= 0, f"{s}.weight_decay", "must be >= 0")
        _require(0.0 <= self.beta1 < 1.0, f"{s}.beta1", f"must be in [0, 1), got {self.beta1}")
        _require(0.0 <= self.beta2 < 1.0, f"{s}.beta2", f"must be in [0, 1), got {self.beta2}")
        _require(self.grad_clip >= 0, f"{s}.grad_clip", "must be >= 0 (0 disables clipping)")
        if self.grad_depth is not None:
            _require(
                self.grad_depth >= 1, f"{s}.grad_depth", f"must be >= 1, got {self.grad_depth}"
            )
        _require(self.log_every >= 1, f"{s}.log_every", f"must be >= 1, got {self.log_every}")
        _require(self.checkpoint_every >= 0, f"{s}.checkpoint_every", "must be >= 0")
        _require(self.keep_checkpoints >= 1, f"{s}.keep_checkpoints", "must be >= 1")
        bad = [f for f in self.snapshots if not 0.0 < f <= 1.0]
        _require(not bad, f"{s}.snapshots", f"fractions must be in (0, 1], got {bad}")

    @property
    def micro_batch(self) -> int:
        return self.micro_batch_size or self.batch_size

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len


@dataclass
class DataConfig:
    """Where training and validation batches come from."""

    SECTION: ClassVar[str] = "data"

    kind: Literal["synthetic", "tokens", "bios"] = "synthetic"
    """`synthetic`: a seeded toy language (tests, smoke runs). `tokens`: shards written by
    `fixedfirst prepare` at `path`. `bios`: the synthetic biography task."""
    path: str | None = None
    """`tokens`: the prepared data directory."""
    seed: int = 0
    """Seed of the data itself (the synthetic language, the bios people); the order in which
    training visits it follows train.seed."""
    people: int = 1000
    """`bios`: number of fictional people."""
    first_names: int = 400
    """`bios`: size of the first-name pool."""
    middle_names: int = 400
    """`bios`: size of the middle-name pool."""
    last_names: int = 1000
    """`bios`: size of the last-name pool."""
    cities: int = 200
    """`bios`: birth-city pool size."""
    universities: int = 300
    """`bios`: university pool size."""
    majors: int = 100
    """`bios`: major pool size."""
    employers: int = 263
    """`bios`: employer pool size."""

    def __post_init__(self) -> None:
        s = self.SECTION
        for name in (
            "people",
            "first_names",
            "middle_names",
            "last_names",
            "cities",
            "universities",
            "majors",
            "employers",
        ):
            value = getattr(self, name)
            _require(value >= 1, f"{s}.{name}", f"must be >= 1, got {value}")
        if self.kind == "tokens":
            _require(
                self.path is not None,
                f"{self.SECTION}.path",
                "kind = 'tokens' needs path = the directory written by `fixedfirst prepare`",
            )


@dataclass
class EvalConfig:
    """Validation during and after training."""

    SECTION: ClassVar[str] = "eval"

    depths: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32])
    """Serving depths at which validation NLL is measured (one pass of the recurrence)."""
    every: int = 0
    """Steps between evaluations (0: only at the end)."""
    batches: int = 4
    """Validation batches per evaluation."""

    def __post_init__(self) -> None:
        s = self.SECTION
        _require(len(self.depths) > 0, f"{s}.depths", "needs at least one depth")
        bad = [d for d in self.depths if d < 1]
        _require(not bad, f"{s}.depths", f"depths must be >= 1, got {bad}")
        _require(self.every >= 0, f"{s}.every", "must be >= 0")
        _require(self.batches >= 1, f"{s}.batches", "must be >= 1")


SECTIONS: tuple[type, ...] = (ModelConfig, ScheduleConfig, TrainConfig, DataConfig, EvalConfig)


@dataclass
class RunConfig:
    """A whole run: one instance of every section."""

    model: ModelConfig = field(default_factory=ModelConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    data: DataConfig = field(default_factory=DataConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self) -> None:
        _require(
            self.train.seq_len <= self.model.max_seq_len,
            "train.seq_len",
            f"{self.train.seq_len} exceeds model.max_seq_len = {self.model.max_seq_len}",
        )

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {name: _section_dict(getattr(self, name)) for name in _section_names()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        unknown = sorted(set(data) - set(_section_names()))
        if unknown:
            raise UserError(
                f"unknown section [{unknown[0]}]; valid sections: "
                + ", ".join(f"[{n}]" for n in _section_names())
            )
        sections = {}
        for section_cls in SECTIONS:
            raw = data.get(section_cls.SECTION, {})
            if not isinstance(raw, dict):
                raise UserError(f"[{section_cls.SECTION}] must be a table of key = value lines")
            sections[section_cls.SECTION] = build_section(section_cls, raw)
        return cls(**sections)


def _section_names() -> list[str]:
    return [c.SECTION for c in SECTIONS]


def _section_dict(section: Any) -> dict[str, Any]:
    return {k: v for k, v in asdict(section).items() if v is not None}


# ---------------------------------------------------------------------------------------------
# Type checking of raw TOML values against the dataclass annotations.


def _coerce(value: Any, annotation: Any, key: str) -> Any:
    """Return `value` as the annotated type, or raise a UserError naming `key`."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (Union, types.UnionType):
        is_none = value is None or (isinstance(value, str) and value.lower() == "none")
        if is_none and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(value, inner[0], key)
    if origin is Literal:
        if value not in args:
            choices = ", ".join(repr(a) for a in args)
            raise UserError(f"{key}: {value!r} is not one of {choices}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise UserError(f"{key}: expected a list, got {value!r}")
        return [_coerce(v, args[0], f"{key}[{i}]") for i, v in enumerate(value)]
    if annotation is bool:
        if not isinstance(value, bool):
            raise UserError(f"{key}: expected true or false, got {value!r}")
        return value
    if annotation is int:
        if isinstance(value, float) and value.is_integer() and math.isfinite(value):
            return int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise UserError(f"{key}: expected an integer, got {value!r}")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"{key}: expected a number, got {value!r}")
        if not math.isfinite(value):
            raise UserError(f"{key}: must be a finite number, got {value!r}")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise UserError(f"{key}: expected a string, got {value!r}")
        return value
    raise TypeError(f"unsupported annotation {annotation!r} for {key}")  # a bug, not user input


def build_section(section_cls: type, raw: dict[str, Any]) -> Any:
    """Build one section dataclass from a dict of raw values, checking keys and types."""
    name = section_cls.SECTION
    hints = typing.get_type_hints(section_cls)
    known = {f.name: f for f in fields(section_cls)}
    for key in raw:
        if key not in known:
            raise UserError(
                f"unknown key {name}.{key}; valid keys in [{name}]: " + ", ".join(sorted(known))
            )
    values = {key: _coerce(value, hints[key], f"{name}.{key}") for key, value in raw.items()}
    return section_cls(**values)


def field_docs(section_cls: type) -> list[tuple[str, str, str]]:
    """(name, default, docstring) for every field, read from the attribute docstrings."""
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(section_cls)))
    docs: dict[str, str] = {}
    body = tree.body[0].body  # type: ignore[attr-defined]
    for node, nxt in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
        ):
            docs[node.target.id] = " ".join(str(nxt.value.value).split())
    out = []
    for f in fields(section_cls):
        if f.default is not MISSING:
            default = f.default
        elif f.default_factory is not MISSING:
            default = f.default_factory()
        else:  # pragma: no cover
            default = None
        out.append((f.name, _toml_value(default) if default is not None else "unset", docs[f.name]))
    return out


# ---------------------------------------------------------------------------------------------
# Files and overrides.


def parse_override(text: str) -> tuple[str, str, Any]:
    """Split `section.key=value`; the value is read as TOML, or else taken as a bare string."""
    if "=" not in text or "." not in text.split("=", 1)[0]:
        raise UserError(f"--set {text!r}: expected section.key=value, e.g. --set train.lr=3e-4")
    path, raw = text.split("=", 1)
    section, key = path.strip().split(".", 1)
    raw = raw.strip()
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return section, key, value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of the raw config dict with the `--set` overrides applied."""
    merged = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for text in overrides:
        section, key, value = parse_override(text)
        if section not in _section_names():
            raise UserError(
                f"--set {text!r}: unknown section [{section}]; valid sections: "
                + ", ".join(_section_names())
            )
        merged.setdefault(section, {})[key] = value
    return merged


def read_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML file, turning a missing file or a syntax error into a one-line UserError."""
    p = Path(path)
    if p.is_dir():
        raise UserError(f"config file {str(p)!r} is a directory, not a TOML file")
    if not p.is_file():
        raise UserError(f"config file {str(p)!r} does not exist")
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{p}: TOML syntax error: {e}") from None
    except UnicodeDecodeError:
        raise UserError(f"{p}: not a UTF-8 text file") from None


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    """Load a run configuration from a TOML file (or the defaults) plus `--set` overrides."""
    data = read_toml(path) if path is not None else {}
    return RunConfig.from_dict(apply_overrides(data, overrides or []))


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def to_toml(config: RunConfig) -> str:
    """The resolved configuration as TOML text (unset optional keys are left out)."""
    lines: list[str] = []
    for name, section in config.to_dict().items():
        lines.append(f"[{name}]")
        lines.extend(f"{k} = {_toml_value(v)}" for k, v in section.items())
        lines.append("")
    return "\n".join(lines)
