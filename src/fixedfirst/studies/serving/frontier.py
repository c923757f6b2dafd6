"""The exit frontier of one trained model, as a results document: `fixedfirst frontier RUN` and
each run of the serving-economics study.

Which held-out set and quality a run is measured on follows from its data: a chains run is scored
by exact-match accuracy on a fresh draw of evaluation sequences (`ExitAccuracy`), any other run
(or an export given token data with --data) by next-token NLL on rows drawn from its validation
split (`NextTokenNLL`). The draw takes the settings' seed and the run's training seed (and data
seed), so that every schedule of one seed is scored on the same held-out rows (paired) and each
seed on its own (an interval over seeds covers the held-out sample too). The measurements are in
`serve/frontier.py`, their reading in `serve/pareto.py`; the document holds every point and what
the reading made of them, and `frontier_report.py` renders it.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from fixedfirst.config import TransformersModelConfig
from fixedfirst.data.source import Batch
from fixedfirst.errors import UserError
from fixedfirst.files.paths import shown
from fixedfirst.model import LoopedTransformer, check_depth
from fixedfirst.model.serving import no_readout_refusal, with_readout_per_pass
from fixedfirst.progress import Progress
from fixedfirst.serve.exit_rules import EXIT_RULES, exit_rule
from fixedfirst.serve.frontier import (
    DEFAULT_THRESHOLDS,
    HeldOutScorer,
    NextTokenNLL,
    SpeedSettings,
    frontier_points,
    measure_quality,
    measure_speed,
    servings,
    speed_prompts,
)
from fixedfirst.serve.modes import Adaptive
from fixedfirst.serve.pareto import matched_quality, pareto_front

FORMAT = "fixedfirst-frontier"
VERSION = 1
TEXT_BATCH = 32
"""Held-out rows per teacher-forced batch of a text run."""


@dataclass
class FrontierSettings:
    """What a frontier measures: the `[frontier]` section of the serving-economics config, and
    the flags of `fixedfirst frontier`."""

    SECTION: ClassVar[str] = "frontier"

    max_depth: int | None = None
    """The deepest serving depth: every rule stops there at the latest, and the fixed depths
    end there (None: the deepest depth the run trained at)."""
    depths: list[int] | None = None
    """The fixed depths (None: every depth 1..max_depth)."""
    exits: dict[str, list[float]] = field(
        default_factory=lambda: {k: list(v) for k, v in DEFAULT_THRESHOLDS.items()}
    )
    """Each exit rule swept and its thresholds (kl, entropy, state, argmax)."""
    rows: int = 64
    """Held-out rows of a text run (from its validation split)."""
    sequences: int = 256
    """Evaluation sequences of a chains run."""
    seed: int = 0
    """The held-out draw's seed (mixed with each run's own seeds)."""
    speed_rows: int = 8
    """Prompts decoded as one batch for tokens per second."""
    speed_tokens: int = 32
    """Greedy tokens per prompt."""
    speed_repeats: int = 3
    """Rounds of timing every point (the median kept)."""

    def __post_init__(self) -> None:
        s = self.SECTION
        if self.max_depth is not None:
            check_depth(self.max_depth, f"{s}.max_depth")
        if self.depths is not None and (
            not self.depths
            or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in self.depths)
        ):
            raise UserError(
                f"{s}.depths: fixed depths are integers >= 1, at least one, got {self.depths}"
            )
        if not self.exits:
            raise UserError(f"{s}.exits: name at least one exit rule ({', '.join(EXIT_RULES)})")
        for name, thresholds in self.exits.items():
            if name not in EXIT_RULES:
                raise UserError(
                    f"{s}.exits: unknown exit rule {name!r}; choose from {', '.join(EXIT_RULES)}"
                )
            if not isinstance(thresholds, list) or not thresholds:
                raise UserError(f"{s}.exits.{name}: give a list of at least one threshold")
            if len(set(thresholds)) != len(thresholds):
                raise UserError(f"{s}.exits.{name}: a threshold is listed twice: {thresholds}")
            for t in thresholds:
                try:
                    exit_rule(name, t)
                except UserError as e:
                    raise UserError(f"{s}.exits.{name}: {e}") from None
        for name in ("rows", "sequences"):
            if not 2 <= getattr(self, name) <= 100_000:
                raise UserError(f"{s}.{name}: must be in 2..100000, got {getattr(self, name)}")
        if not 0 <= self.seed < 2**63:
            raise UserError(f"{s}.seed: must be in [0, 2**63), got {self.seed}")
        SpeedSettings(self.speed_rows, self.speed_tokens, self.speed_repeats)  # checks them

    @property
    def speed(self) -> SpeedSettings:
        return SpeedSettings(self.speed_rows, self.speed_tokens, self.speed_repeats)

    def resolved(self, max_depth: int) -> FrontierSettings:
        """With the run's deepest training depth filled in where none was given, and the fixed
        depths checked against the deepest serving depth."""
        deepest = self.max_depth if self.max_depth is not None else max_depth
        depths = list(range(1, deepest + 1)) if self.depths is None else sorted(set(self.depths))
        if depths[-1] > deepest:
            raise UserError(
                f"{self.SECTION}.depths: fixed depths go up to max_depth = {deepest}, got "
                f"{depths[-1]}"
            )
        return replace(self, max_depth=deepest, depths=depths)


def draw_seed(seed: int, *parts: int) -> int:
    """The held-out draw of a run: the settings' seed and the run's own seeds, mixed."""
    return int(np.random.SeedSequence([seed, *parts, 0xF407]).generate_state(1)[0])


@dataclass
class Subject:
    """What a frontier is measured on: a model, where it came from, and its held-out scorer."""

    path: Path
    model: LoopedTransformer
    scorer: HeldOutScorer
    trained_depth: int
    """The deepest depth the model trained at (the default max_depth)."""
    about: dict[str, Any]
    """The run (or export), its step, schedule and weights, for the document."""
    held_out: dict[str, Any]


def batches_sha256(batches: list[Batch]) -> str:
    digest = hashlib.sha256()
    for batch in batches:
        for tensor in (batch.inputs, batch.targets):
            digest.update(tensor.to(torch.int64).contiguous().numpy().tobytes())
    return digest.hexdigest()


def text_batches(source, rows: int, seed: int, where: str) -> list[Batch]:
    """`rows` validation rows drawn by `seed`, in batches of TEXT_BATCH; refused in one line
    when the validation split holds fewer."""
    size = min(rows, TEXT_BATCH)
    batches = source.validation_batches(-(-rows // size), size, seed)
    drawn = sum(len(b.inputs) for b in batches)
    if drawn < rows:
        raise UserError(
            f"{where}: the validation split holds {drawn} rows, fewer than the {rows} held-out "
            f"rows asked for; ask for at most {drawn} (--rows, frontier.rows)"
        )
    out, left = [], rows
    for batch in batches:
        if left > 0:
            out.append(Batch(batch.inputs[:left], batch.targets[:left]))
        left -= len(batch.inputs)
    return out


def open_subject(
    path: str | Path,
    settings: FrontierSettings,
    data: str | None = None,
    device: str | torch.device = "cpu",
) -> Subject:
    """A run directory (its newest checkpoint) or an export with --data, its held-out set drawn;
    refused in one line when there is no run, or no held-out set can be drawn."""
    from fixedfirst.data.registry import kind_options
    from fixedfirst.runs.checkpoint import MODEL_FILE
    from fixedfirst.runs.exported import is_export
    from fixedfirst.runs.opening import load_run, open_run, require_data, trained_source
    from fixedfirst.runs.served import deepest_training_depth
    from fixedfirst.schedules import describe
    from fixedfirst.tasks.chains.accuracy import ExitAccuracy
    from fixedfirst.tasks.chains.source import evaluation_set

    path = Path(path)
    if is_export(path):
        return open_export(path, settings, data, device)
    config = open_run(path, data)[1]
    if isinstance(config.model, TransformersModelConfig):
        raise no_readout_refusal("the exit frontier", config.model.architecture)
    if config.data.kind != "chains":
        require_data(config, path, data)  # before the weights are read
    loaded = load_run(path, device=device, data=data)
    config = loaded.config
    about = {
        "run": str(path),
        "step": loaded.checkpoint.step,
        "schedule": describe(config.schedule),
        "seed": config.train.seed,
        "weights_sha256": loaded.checkpoint.meta["files"][MODEL_FILE],
    }
    scorer: HeldOutScorer
    if config.data.kind == "chains":
        options = kind_options(config)
        seed = draw_seed(settings.seed, config.data.seed, config.train.seed)
        scorer = ExitAccuracy(evaluation_set(options, seed, settings.sequences), options)
        held_out = {"kind": "chains", "sequences": settings.sequences, "draw": seed}
    else:
        source = trained_source(config, loaded.checkpoint.meta.get("data"))
        seed = draw_seed(settings.seed, config.train.seed)
        scorer = NextTokenNLL(text_batches(source, settings.rows, seed, shown(path)))
        held_out = {"kind": "text", "rows": settings.rows, "draw": seed, "data": source.describe()}
    held_out["sha256"] = batches_sha256(scorer.batches)
    return Subject(path, loaded.model, scorer, deepest_training_depth(config), about, held_out)


def open_export(
    path: Path, settings: FrontierSettings, data: str | None, device: str | torch.device
) -> Subject:
    """An export scored on token data prepared with its tokenizer (--data)."""
    from fixedfirst.data.tokens import TokenSource
    from fixedfirst.runs.exported import load, read_export

    if data is None:
        raise UserError(
            f"{shown(path)} is an export: it holds no held-out data to score on; give --data DIR "
            "(token data prepared with its tokenizer), or run frontier on the run directory it "
            "was exported from"
        )
    config = read_export(path)
    if not Path(data).is_dir():
        raise UserError(f"--data {shown(data)}: no such data directory")
    model = with_readout_per_pass(load(path, device), "the exit frontier")
    source = TokenSource(data, model.config.max_seq_len)
    if source.vocab_size > model.config.vocab_size:
        raise UserError(
            f"--data {shown(data)}: its tokenizer has {source.vocab_size} ids, the export's model "
            f"only {model.config.vocab_size}; give data prepared with the export's tokenizer"
        )
    seed = draw_seed(settings.seed)
    scorer = NextTokenNLL(text_batches(source, settings.rows, seed, shown(data)))
    about = {
        "run": str(path),
        "step": config.get("source", {}).get("step"),
        "schedule": config.get("source", {}).get("schedule"),
        "seed": None,
        "weights_sha256": config.get("source", {}).get("weights_sha256"),
    }
    held_out = {
        "kind": "text",
        "rows": settings.rows,
        "draw": seed,
        "data": source.describe(),
        "sha256": batches_sha256(scorer.batches),
    }
    return Subject(path, model, scorer, int(config.get("default_depth", 1)), about, held_out)


def measure_frontier(
    subject: Subject, settings: FrontierSettings, quiet: bool = False
) -> dict[str, Any]:
    """The frontier document of `subject`: every point measured (quality, then speed) and read."""
    settings = settings.resolved(subject.trained_depth)
    assert settings.max_depth is not None and settings.depths is not None
    modes = servings(settings.max_depth, settings.depths, settings.exits)
    model, scorer = subject.model, subject.scorer
    speed = settings.speed
    prompts, new_tokens = speed_prompts(
        scorer.batches, speed.rows, model.config.max_seq_len, speed.new_tokens
    )
    speed = replace(speed, new_tokens=new_tokens)
    rules = sum(isinstance(m, Adaptive) for m in modes)
    units = len(scorer.batches) + rules + len(modes) * speed.repeats
    progress = Progress(units, quiet=quiet, description=f"frontier {shown(subject.path)}")
    done = 0

    def tell(point: str) -> None:
        nonlocal done
        done += 1
        progress.update(done, {"point": point})

    try:
        scored = measure_quality(model, scorer, modes, tell)
        speeds = measure_speed(model, prompts, modes, speed, tell)
    finally:
        progress.close()
    points = frontier_points(model, modes, scored, speeds)
    measure = scorer.measure
    return {
        "format": FORMAT,
        "version": VERSION,
        **subject.about,
        "parameters": model.parameter_counts()["total"],
        "settings": asdict(settings),
        "held_out": subject.held_out,
        "quality": measure.to_dict(),
        "speed": {
            "rows": len(prompts),
            "prompt_tokens": len(prompts[0]),
            "new_tokens": speed.new_tokens,
            "repeats": speed.repeats,
            "device": str(next(model.parameters()).device),
            "threads": torch.get_num_threads(),
        },
        "points": points,
        "pareto": pareto_front(points, measure),
        "matched": matched_quality(points, measure),
    }


def reusable(document: dict[str, Any], subject: Subject, settings: FrontierSettings) -> bool:
    """Whether a saved frontier document measured this subject's weights on this held-out set
    with these settings (the study reuses it instead of measuring again)."""
    resolved = settings.resolved(subject.trained_depth)
    return (
        document.get("format") == FORMAT
        and document.get("version") == VERSION
        and document.get("weights_sha256") == subject.about["weights_sha256"]
        and document.get("held_out") == subject.held_out
        and document.get("settings") == asdict(resolved)
    )
