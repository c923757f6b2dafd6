"""`[train.lowrank]`: low-rank adapters instead of full fine-tuning, for a transformers looped
architecture (model/lowrank.py applies them through peft).

Its own module so that config/sections.py stays one sitting long; sections.py imports it for
`TrainConfig.lowrank`, and both `fixedfirst.config` and `fixedfirst.config.sections` export it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from fixedfirst.config.schema import check_fields
from fixedfirst.errors import UserError

INKLING_TARGETS = (
    "q_proj.linear",
    "k_proj.linear",
    "v_proj.linear",
    "o_proj.linear",
    "o_proj.gate_proj",
)
"""Inkling2Loop's attention projections, as peft names modules: by the end of their path."""

INKLING_EXPERTS = ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")
"""Inkling2Loop's expert tensors: one (experts, out, in) parameter each per layer, which peft
adapts as parameters (its `target_parameters`), one low-rank pair per expert."""

MAX_RANK = 65_536


@dataclass
class LowRankConfig:
    """`[train.lowrank]`: train low-rank adapters (LoRA, through peft: `pip install
    'fixedfirst[lowrank]'`) on a transformers looped architecture, its own weights frozen. A
    looped layer's adapters are shared by every pass, as the layer is. Checkpoints hold the
    adapters, their AdamW state and the frozen weights' SHA-256, which a resume and `eval`
    check. Absent: every weight is trained (full fine-tuning)."""

    SECTION: ClassVar[str] = "train.lowrank"

    rank: int = 16
    """The adapters' rank r: each adapted (out, in) matrix W trains W + (alpha / r) B A, with A
    (r, in) and B (out, r) (B starts at zero, so step 0 computes the base model)."""
    alpha: float = 32.0
    """LoRA's alpha: the update B A is scaled by alpha / rank."""
    targets: list[str] = field(default_factory=lambda: list(INKLING_TARGETS))
    """The linear modules adapted, named by the end of their path (peft's `target_modules`).
    Default: Inkling2Loop's attention projections (q, k, v, the output and its gate); each name
    must match a linear module of the model."""
    parameters: list[str] = field(default_factory=lambda: list(INKLING_EXPERTS))
    """Parameters adapted as tensors (peft's `target_parameters`): a mixture-of-experts layer's
    stacked expert weights, one adapter per expert. Default: Inkling2Loop's experts
    (`mlp.experts.gate_up_proj`, `mlp.experts.down_proj`); [] for none."""

    def __post_init__(self) -> None:
        check_fields(self)  # in code as in the file (types and choices)
        # Read from TOML, the messages come prefixed with the table's name ("train.lowrank: ").
        check(1 <= self.rank <= MAX_RANK, f"rank must be in 1..{MAX_RANK}, got {self.rank}")
        check(self.alpha > 0, f"alpha must be > 0, got {self.alpha}")
        check(
            bool(self.targets or self.parameters),
            "targets and parameters are both empty: name at least one module or parameter to "
            "adapt (or remove [train.lowrank] to train every weight)",
        )
        for key, names in (("targets", self.targets), ("parameters", self.parameters)):
            check(all(n.strip() for n in names), f"{key} holds an empty name")
            twice = sorted({n for n in names if names.count(n) > 1})
            check(not twice, f"{key}: {', '.join(map(repr, twice))} is listed twice")


def check(ok: bool, message: str) -> None:
    if not ok:
        raise UserError(message)
