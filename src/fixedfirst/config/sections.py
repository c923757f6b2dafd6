"""The sections of a run configuration: `[model]`, `[schedule]`, `[train]`, `[data]`, `[eval]`.

Each is a dataclass whose attribute docstrings are the configuration reference (`fixedfirst
config-reference` prints them) and whose `__post_init__` refuses what is impossible, naming the
key: d_model divisible by n_heads, depth >= 1, switch in [0, 1], ...
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from fixedfirst.config.architectures import checked_options, looped_architecture
from fixedfirst.config.checkpoints import check_checkpoint_keys
from fixedfirst.config.limits import (
    MAX_BATCH,
    MAX_DEPTH,
    MAX_LAYERS,
    MAX_SEED,
    MAX_SEQ_LEN,
    MAX_VOCAB,
    MAX_WIDTH,
)
from fixedfirst.config.lowrank import LowRankConfig
from fixedfirst.config.schema import check_fields, require

DEPTH_COST = "evaluation and training cost grow linearly with depth"


def at_most(value: int, bound: int, key: str, why: str = "") -> None:
    """Refuse a value past its bound (config/limits.py), naming the bound."""
    reason = f" ({why})" if why else ""
    require(value <= bound, key, f"must be <= {bound:,}{reason}, got {value:,}")


def seed_range(seed: int, key: str) -> None:
    require(0 <= seed <= MAX_SEED, key, f"must be in [0, 2**63 - 1], got {seed}")


@dataclass
class ModelConfig:
    """The looped transformer's shape (docs/design.md §1)."""

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
    coda_norm: bool = True
    """Normalise the recurrent state before the coda (RMSNorm); false feeds the coda the raw
    state (an ablation of what keeps a fixed-depth model usable off its training depth)."""
    tie_embeddings: bool = False
    """Share the embedding matrix with the output head."""
    rope_base: float = 10000.0
    """Rotary position embedding base."""
    checkpoint: str | None = None
    """A Hugging Face checkpoint directory whose weights the run starts from instead of a random
    initialisation: fixedfirst's own export (`fixedfirst export --format hf`), whose config.json
    gives every key above (a key given here too must agree); a relative path is read from the
    configuration file's directory (docs/guides/checkpoints.md)."""
    checkpoint_sha256: str | None = None
    """The checksum of the checkpoint's weights, which a run records when it starts: a resume
    from other weights is refused. Leave it out; fixedfirst computes it."""
    checkpoint_depth: int | None = None
    """The checkpoint's default depth (config.json's `depth`), where a control trains; read."""

    def __post_init__(self) -> None:
        check_fields(self)
        s = self.SECTION
        check_checkpoint_keys(self)
        require(self.vocab_size >= 2, f"{s}.vocab_size", f"must be >= 2, got {self.vocab_size}")
        require(self.d_model >= 2, f"{s}.d_model", f"must be >= 2, got {self.d_model}")
        require(self.n_heads >= 1, f"{s}.n_heads", f"must be >= 1, got {self.n_heads}")
        require(
            self.d_model % self.n_heads == 0,
            f"{s}.d_model",
            f"{self.d_model} is not divisible by n_heads = {self.n_heads}",
        )
        require(
            (self.d_model // self.n_heads) % 2 == 0,
            f"{s}.n_heads",
            f"head size d_model/n_heads = {self.d_model // self.n_heads} must be even (rotary)",
        )
        require(self.n_prelude >= 0, f"{s}.n_prelude", f"must be >= 0, got {self.n_prelude}")
        require(self.n_core >= 1, f"{s}.n_core", f"must be >= 1, got {self.n_core}")
        require(self.n_coda >= 0, f"{s}.n_coda", f"must be >= 0, got {self.n_coda}")
        require(self.max_seq_len >= 1, f"{s}.max_seq_len", "must be >= 1")
        require(self.d_ff is None or self.d_ff >= 1, f"{s}.d_ff", "must be >= 1")
        require(self.rope_base > 1, f"{s}.rope_base", "must be > 1")
        at_most(self.vocab_size, MAX_VOCAB, f"{s}.vocab_size")
        at_most(self.d_model, MAX_WIDTH, f"{s}.d_model")
        at_most(self.d_ff or 1, MAX_WIDTH, f"{s}.d_ff")
        for layers in ("n_prelude", "n_core", "n_coda"):
            at_most(getattr(self, layers), MAX_LAYERS, f"{s}.{layers}")
        at_most(self.max_seq_len, MAX_SEQ_LEN, f"{s}.max_seq_len")
        seed_range(self.eval_seed, f"{s}.eval_seed")
        require(math.isfinite(self.rope_base), f"{s}.rope_base", "must be a finite number")

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
class TransformersModelConfig:
    """A looped architecture of the transformers library, trained and scored by fixedfirst's own
    commands (`[model] kind = "transformers"`; docs/guides/any-loop.md). Its keys replace the
    looped transformer's (a key of the table above is refused here); the architecture's own
    configuration is the table [model.transformers]."""

    SECTION: ClassVar[str] = "model"

    kind: Literal["transformers"]
    """`transformers`: the architecture below, from the transformers library (leave `kind` out
    for fixedfirst's own looped transformer)."""
    architecture: str
    """The model class as transformers exports it: `Inkling2LoopForCausalLM` (transformers >=
    5.24: `pip install 'fixedfirst[looped]'`), a mixture-of-experts decoder whose layers
    loop_layer_index_start..loop_layer_index_end run once per loop pass."""
    options: dict[str, Any] = field(default_factory=dict, metadata={"table": True})
    """The architecture's configuration: the table [model.transformers], keys of its
    configuration class (Inkling2LoopTextConfig: hidden_size, n_routed_experts, ...), checked
    by it and completed with its defaults in the run's config.toml. The number of loop passes
    is the schedule's and is not a key here."""
    checkpoint: str | None = None
    """A Hugging Face checkpoint directory (config.json, safetensors weights, tokenizer files)
    whose weights the run starts from instead of a random initialisation. `architecture` and the
    table [model.transformers] then come from its config.json (given here too, they must agree),
    so `[model] checkpoint = "DIR"` alone is a whole [model]; a relative path is read from the
    configuration file's directory (docs/guides/checkpoints.md)."""
    checkpoint_sha256: str | None = None
    """The checksum of the checkpoint's weights, which a run records when it starts: a resume
    from other weights is refused. Leave it out; fixedfirst computes it."""
    checkpoint_depth: int | None = None
    """The loop passes the checkpoint was trained at (config.json's `loop_num_passes`), where a
    finishing run's control trains. Read from the checkpoint; leave it out."""

    def __post_init__(self) -> None:
        check_fields(self)
        check_checkpoint_keys(self)
        require(
            isinstance(self.architecture, str) and self.architecture.strip() != "",
            f"{self.SECTION}.architecture",
            "must name a transformers model class, e.g. 'Inkling2LoopForCausalLM'",
        )
        self.options = checked_options(looped_architecture(self.architecture), self.options)

    @property
    def vocab_size(self) -> int:
        """The token ids the model takes and predicts (its embedding's and head's sizes)."""
        keys = looped_architecture(self.architecture).vocab_keys
        return min(int(self.options[key]) for key in keys)

    @property
    def max_seq_len(self) -> int:
        """The longest sequence the model takes."""
        key = looped_architecture(self.architecture).positions_key
        return int(self.options[key])


@dataclass
class ScheduleConfig:
    """Which training depth each optimizer step uses (docs/design.md §2)."""

    SECTION: ClassVar[str] = "schedule"

    kind: Literal["fixed", "uniform", "poisson-lognormal", "progressive", "fixed-first"] = (
        "fixed-first"
    )
    """Schedule kind."""
    depth: int = 4
    """`fixed`: the depth of every step."""
    k0: int = 2
    """`fixed-first`: the depth before the switch."""
    switch: float | Literal["auto"] = 0.67
    """`fixed-first`: fraction of the token budget trained at k0, or `auto`: the run decides when
    to switch, by the rule of [switch] (docs/design.md §14)."""
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
        check_fields(self)
        s = self.SECTION
        require(self.depth >= 1, f"{s}.depth", f"must be >= 1, got {self.depth}")
        require(self.k0 >= 1, f"{s}.k0", f"must be >= 1, got {self.k0}")
        require(self.k_min >= 1, f"{s}.k_min", f"must be >= 1, got {self.k_min}")
        require(
            self.k_max >= self.k_min,
            f"{s}.k_max",
            f"{self.k_max} is below k_min = {self.k_min}",
        )
        require(
            self.switch_fraction is None or 0.0 <= self.switch_fraction <= 1.0,
            f"{s}.switch",
            f"must be in [0, 1] or 'auto', got {self.switch}",
        )
        if self.kind == "fixed-first":
            require(
                self.k0 <= self.k_max,
                f"{s}.k0",
                f"{self.k0} exceeds k_max = {self.k_max}; lower k0 or raise k_max",
            )
        require(0 < self.sigma <= 4, f"{s}.sigma", f"must be in (0, 4], got {self.sigma}")
        for key in ("depth", "k0", "k_min", "k_max"):
            at_most(getattr(self, key), MAX_DEPTH, f"{s}.{key}", DEPTH_COST)
        require(0.0 < self.warmup <= 1.0, f"{s}.warmup", f"must be in (0, 1], got {self.warmup}")
        if self.mean is not None:
            require(
                self.mean == 1.0 or 1.0 < self.mean < self.k_max,
                f"{s}.mean",
                f"must be 1 or strictly between 1 and k_max = {self.k_max} (it is the mean "
                f"depth after the clip at k_max), got {self.mean}",
            )
        if self.kind in ("poisson-lognormal", "progressive") or self.finish == "poisson-lognormal":
            require(
                self.mean_depth == 1.0 or self.mean_depth < self.k_max,
                f"{s}.k_max",
                f"k_max = {self.k_max} leaves no room for a Poisson-lognormal mean depth of "
                f"{self.mean_depth:g}; raise k_max or set schedule.mean",
            )

    ONLY_FOR: ClassVar[dict[str, str]] = {
        "depth": "kind = 'fixed'",
        "k0": "kind = 'fixed-first'",
        "switch": "kind = 'fixed-first'",
        "finish": "kind = 'fixed-first'",
        "warmup": "kind = 'progressive'",
        "ramp": "kind = 'progressive'",
        "mean": "a Poisson-lognormal depth (kind = 'poisson-lognormal' or 'progressive', or "
        "finish = 'poisson-lognormal')",
        "sigma": "a Poisson-lognormal depth (kind = 'poisson-lognormal' or 'progressive', or "
        "finish = 'poisson-lognormal')",
    }
    """The keys only some schedules read, and which (k_min and k_max are read by all but
    `fixed`: they also set a Poisson-lognormal schedule's default mean and its clip)."""

    @classmethod
    def unused(cls, given: list[str], kind: str, finish: str) -> list[str]:
        """The keys of `given` that a schedule of `kind` (and `finish`) never reads."""
        poisson = kind in ("poisson-lognormal", "progressive") or (
            kind == "fixed-first" and finish == "poisson-lognormal"
        )
        read = {
            "fixed": {"depth"},
            "progressive": {"warmup", "ramp"},
            "fixed-first": {"k0", "switch", "finish"},
        }.get(kind, set()) | ({"mean", "sigma"} if poisson else set())
        return [key for key in given if key in cls.ONLY_FOR and key not in read]

    @property
    def switch_fraction(self) -> float | None:
        """`switch` as the fraction of the run trained at k0; None for `auto` (the schema lets
        no other string through)."""
        return None if isinstance(self.switch, str) else self.switch

    @property
    def auto_switch(self) -> bool:
        """fixed-first whose run decides the switch step (docs/design.md §14)."""
        return self.kind == "fixed-first" and self.switch_fraction is None

    @property
    def deepest_depth(self) -> int:
        """The deepest depth a step of this schedule can draw (a Poisson-lognormal draw is clipped
        at k_max; a fixed-first run's finish reaches k_max)."""
        if self.kind == "fixed":
            return self.depth
        return max(self.k0, self.k_max) if self.kind == "fixed-first" else self.k_max

    @property
    def mean_depth(self) -> float:
        """The Poisson-lognormal mean in use (explicit, or the uniform range's midpoint)."""
        return self.mean if self.mean is not None else (self.k_min + self.k_max) / 2


@dataclass
class FinishingLR:
    """`[train.finishing]`: the learning rate of a finishing stage added to a run trained to
    `start_step` steps (`fixedfirst branch --finish`, docs/guides/any-loop.md). Steps before
    `start_step` keep the rate of the `start_step`-step run they were trained as; from it on the
    rate is `constant` at that run's final rate (`final_lr_fraction * lr`), or `rewarm`: linear
    from the final rate up to `peak * lr` over the first `warmup` of the finishing steps, then
    cosine decay back to the final rate at the last step."""

    SECTION: ClassVar[str] = "train.finishing"

    start_step: int
    """The first step of the finishing stage: the steps the original run trained."""
    lr: Literal["constant", "rewarm"] = "constant"
    """The finishing stage's learning rate: `constant` or `rewarm` (above)."""
    peak: float = 0.3
    """`rewarm`: the rate warmed up to, as a fraction of `train.lr`."""
    warmup: float = 0.1
    """`rewarm`: the fraction of the finishing steps spent warming up."""

    def __post_init__(self) -> None:
        check_fields(self)
        s = self.SECTION
        require(self.start_step >= 1, f"{s}.start_step", f"must be >= 1, got {self.start_step}")
        require(0.0 < self.peak <= 1.0, f"{s}.peak", f"must be in (0, 1], got {self.peak}")
        require(0.0 <= self.warmup < 1.0, f"{s}.warmup", f"must be in [0, 1), got {self.warmup}")


@dataclass
class TrainConfig:
    """Optimisation, budgets, device and checkpointing."""

    SECTION: ClassVar[str] = "train"

    seed: int = 0
    """Seed of the model init, the data order and the depth schedule."""
    tokens: int = 1_000_000
    """Token budget; the schedule's switch is a fraction of it. Ignored when `flops` is set."""
    flops: float | None = None
    """Modeled training-FLOP budget. When set, the number of steps is planned on the depths the
    run will draw (a pure function of seed and step), so that runs with different schedules end
    within one step below the same FLOPs."""
    batch_size: int = 16
    """Sequences per optimizer step (global, over all ranks and micro-batches)."""
    micro_batch_size: int | None = None
    """Sequences per forward/backward; batch_size / micro_batch_size steps are accumulated.
    Default: each process's whole share of the batch (batch_size / processes)."""
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
    finishing: FinishingLR | None = None
    """A finishing stage's learning rate, the table `[train.finishing]` that `fixedfirst branch
    --finish` writes: `start_step` (the steps the original run trained, which keep its rate), `lr`
    (`constant` at the final rate, or `rewarm`), `peak` (0.3 of `lr`) and `warmup` (0.1 of the
    stage). Unset: the schedule above over the whole run."""
    lowrank: LowRankConfig | None = None
    """Low-rank adapters instead of full fine-tuning, the table `[train.lowrank]` (its keys
    below; a transformers looped architecture only). Unset: every weight is trained."""
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
    precision: Literal["auto", "fp32", "bf16", "fast"] = "auto"
    """`auto`: bf16 autocast on CUDA, fp32 on CPU. `fast`: bf16 autocast on a GPU with bf16 and
    on a CPU that multiplies bf16 at least 1.5x as fast as fp32 (AVX512-BF16 or AMX; measured
    when the process starts), fp32 elsewhere; the run's log and summary say which."""
    compile: bool | Literal["auto"] = "auto"
    """torch.compile each prelude and coda block and one core iteration; the depth loop stays in
    Python, so a new depth never recompiles. Studies share one cache of compiled graphs
    (DIR/compile-cache). `auto`: compile when the run is long enough for the faster steps to
    repay the compilation (estimated from the planned FLOPs; docs/design.md §10) and a compiler
    is available."""
    checkpoint_activations: bool = False
    """Activation checkpointing per core iteration: keep only each iteration's input state and
    recompute the iteration in the backward. Memory then grows with depth by one (batch,
    seq_len, d_model) state per iteration instead of all of the core's activations, for about
    one more forward of the core per step. A transformers architecture: its own activation
    checkpointing, each decoder layer at every pass recomputed from its inputs."""
    check_memory: bool = True
    """Before the first step, estimate the memory a step needs at the deepest depth the schedule
    can draw (parameters, gradients, AdamW, activations at the micro-batch; docs/design.md §15)
    and refuse a run whose estimate exceeds 90% of the device's memory, naming what to change.
    `false`: train anyway (the estimate counts eager PyTorch's tensors; torch.compile's are not
    modeled)."""
    threads: int | None = None
    """Torch CPU threads per process. Default: OMP_NUM_THREADS when set, else the cores that
    are idle when the run starts (shared among a run's processes on this machine, at least 1):
    on a shared machine, threads beyond the free cores slow every step down."""
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
    log_to: list[Literal["tensorboard", "wandb"]] = field(default_factory=list)
    """Where the metrics also go, besides RUN/metrics.jsonl (the source of truth): `tensorboard`
    (event files in RUN/tensorboard/; `pip install 'fixedfirst[tensorboard]'`) and/or `wandb`
    (Weights & Biases, files in RUN/wandb/; WANDB_MODE=offline needs no account or network;
    `pip install 'fixedfirst[wandb]'`). A resumed run continues the same curves."""
    log_axis: Literal["step", "tokens", "flops"] = "step"
    """The x-axis of those curves: optimizer steps, training tokens, or cumulative modeled training
    FLOPs (in TensorBoard, whose steps are integers, counted in MFLOP)."""

    def __post_init__(self) -> None:
        check_fields(self)
        s = self.SECTION
        require(self.tokens > 0, f"{s}.tokens", f"the token budget must be > 0, got {self.tokens}")
        if self.flops is not None:
            require(self.flops > 0, f"{s}.flops", f"the FLOP budget must be > 0, got {self.flops}")
        require(self.batch_size >= 1, f"{s}.batch_size", f"must be >= 1, got {self.batch_size}")
        if self.micro_batch_size is not None:
            require(
                self.micro_batch_size >= 1 and self.batch_size % self.micro_batch_size == 0,
                f"{s}.micro_batch_size",
                f"{self.micro_batch_size} must be >= 1 and divide batch_size = {self.batch_size}",
            )
        require(self.seq_len >= 2, f"{s}.seq_len", f"must be >= 2, got {self.seq_len}")
        require(self.lr > 0, f"{s}.lr", f"must be > 0, got {self.lr}")
        require(
            self.lr <= 1, f"{s}.lr", f"must be <= 1 (AdamW diverges far below that), got {self.lr}"
        )
        seed_range(self.seed, f"{s}.seed")
        at_most(self.batch_size, MAX_BATCH, f"{s}.batch_size")
        require(
            0.0 <= self.final_lr_fraction <= 1.0,
            f"{s}.final_lr_fraction",
            f"must be in [0, 1], got {self.final_lr_fraction}",
        )
        require(0.0 <= self.warmup < 1.0, f"{s}.warmup", f"must be in [0, 1), got {self.warmup}")
        require(0.0 <= self.decay <= 1.0, f"{s}.decay", f"must be in [0, 1], got {self.decay}")
        require(
            self.lr_schedule != "wsd" or self.warmup + self.decay <= 1.0,
            f"{s}.decay",
            f"warmup + decay = {self.warmup + self.decay} exceeds 1",
        )
        require(
            0 <= self.weight_decay <= 10,
            f"{s}.weight_decay",
            f"must be in [0, 10], got {self.weight_decay}",
        )
        require(0.0 <= self.beta1 < 1.0, f"{s}.beta1", f"must be in [0, 1), got {self.beta1}")
        require(0.0 <= self.beta2 < 1.0, f"{s}.beta2", f"must be in [0, 1), got {self.beta2}")
        require(self.grad_clip >= 0, f"{s}.grad_clip", "must be >= 0 (0 disables clipping)")
        if self.grad_depth is not None:
            require(self.grad_depth >= 1, f"{s}.grad_depth", f"must be >= 1, got {self.grad_depth}")
            at_most(self.grad_depth, MAX_DEPTH, f"{s}.grad_depth", DEPTH_COST)
        if self.threads is not None:
            require(self.threads >= 1, f"{s}.threads", f"must be >= 1, got {self.threads}")
        require(self.log_every >= 1, f"{s}.log_every", f"must be >= 1, got {self.log_every}")
        require(self.checkpoint_every >= 0, f"{s}.checkpoint_every", "must be >= 0")
        require(self.keep_checkpoints >= 1, f"{s}.keep_checkpoints", "must be >= 1")
        bad = [f for f in self.snapshots if not 0.0 < f <= 1.0]
        require(not bad, f"{s}.snapshots", f"fractions must be in (0, 1], got {bad}")
        twice = sorted({x for x in self.log_to if self.log_to.count(x) > 1})
        require(not twice, f"{s}.log_to", f"{', '.join(map(repr, twice))} is listed twice")

    def micro_batch(self, ranks: int = 1) -> int:
        """Rows per forward/backward on each of `ranks` processes: micro_batch_size, or by default
        each process's whole share of the batch (one micro-batch per process and step)."""
        return self.micro_batch_size or max(1, self.batch_size // ranks)

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len


@dataclass
class DataConfig:
    """Where training and validation batches come from.

    `kind` names a data source of `fixedfirst.data.registry`; a kind's own options live in its
    own table, `[data.KIND]` (e.g. `[data.bios] people = 100`), held here as `options` and
    checked against that kind's options dataclass when the source is resolved, so a new task
    adds its fields without touching this section.
    """

    SECTION: ClassVar[str] = "data"

    kind: str = "synthetic"
    """The data source: `synthetic` (a seeded toy language for tests and smoke runs), `tokens`
    (shards written by `fixedfirst prepare` at `path`), or a task such as `bios`; `fixedfirst
    config-reference` lists every kind and its options."""
    path: str | None = None
    """`tokens`: the prepared data directory."""
    seed: int = 0
    """Seed of the data itself (the synthetic language, the task's world); the order in which
    training visits it follows train.seed."""
    options: dict[str, Any] = field(default_factory=dict, metadata={"table": True})
    """The kind's own options: the table [data.KIND]."""

    def __post_init__(self) -> None:
        check_fields(self)
        require(
            isinstance(self.kind, str) and self.kind != "",
            f"{self.SECTION}.kind",
            "must name a data source",
        )
        seed_range(self.seed, f"{self.SECTION}.seed")
        require(
            self.path is None or self.path.strip() != "",
            f"{self.SECTION}.path",
            "is empty; set it to the directory written by `fixedfirst prepare` (a relative path "
            "is read from the config file's directory), or leave the key out",
        )
        if self.kind == "tokens":
            require(
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
        check_fields(self)
        s = self.SECTION
        require(len(self.depths) > 0, f"{s}.depths", "needs at least one depth")
        bad = [d for d in self.depths if d < 1]
        require(not bad, f"{s}.depths", f"depths must be >= 1, got {bad}")
        require(self.every >= 0, f"{s}.every", "must be >= 0")
        require(self.batches >= 1, f"{s}.batches", "must be >= 1")
        at_most(max(self.depths), MAX_DEPTH, f"{s}.depths", DEPTH_COST)
        at_most(self.batches, MAX_BATCH, f"{s}.batches")
