"""A finished run handed back as a checkpoint of its base's own class (`fixedfirst export RUN
--format checkpoint --out DIR`).

A run that started from a checkpoint directory (`[model] checkpoint`) ends as weights of the
same model; handing it back means a directory its holder loads as they loaded the original, with
no fixedfirst: for a transformers looped architecture, the class's own `save_pretrained` (so
`AutoModelForCausalLM.from_pretrained(DIR)` loads it, converting names as it does for the
original), with the checkpoint's tokenizer; for fixedfirst's own export, `--format hf` again.
The depth the model serves by default stays the checkpoint's (a drop-in replacement: the same
cost per token until its user asks for another depth).

Low-rank adapters (`[train.lowrank]`) are merged into the weights by default, or saved alone in
peft's format beside nothing else (`adapters = "alone"`), to be loaded on top of the original.

README.md is a model card: the checkpoint it was finished from, the depths it was finished for,
its profile by depth before and after (the run's evaluation file with the checkpoint beside it,
read back or measured now: evaluation/cached.py), and the data and tokens it was finished on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from fixedfirst.config import RunConfig, TransformersModelConfig
from fixedfirst.config.architectures import looped_architecture, quiet_transformers
from fixedfirst.config.checkpoints import OWN_DEPTH_KEY
from fixedfirst.data.tokenizer import DESCRIPTION_FILE, TOKENIZER_DIR, CheckpointTokenizer
from fixedfirst.errors import UserError
from fixedfirst.evaluation.cached import HeldOut, cached_evaluation
from fixedfirst.evaluation.profile import table
from fixedfirst.export.writer import check_out_dir, write_directory
from fixedfirst.files.paths import shown
from fixedfirst.model.lowrank import is_lowrank, merge_lowrank, save_adapters
from fixedfirst.model.transformers_loop import TransformersLoop
from fixedfirst.runs.opening import find_checkpoint, load_any_run
from fixedfirst.runs.served import deepest_training_depth
from fixedfirst.schedules import describe

Adapters = Literal["merged", "alone"]
CARD = "README.md"


def export_checkpoint(
    run: str | Path, out: str | Path, step: int | None = None, adapters: Adapters = "merged"
) -> dict[str, Any]:
    """Hand the run's checkpoint at `step` (default: the newest) back into `out` as a checkpoint
    of its base's class; what the model card says, as a dict."""
    out = Path(out)
    check_out_dir(out)
    config, ckpt = find_checkpoint(run, step)
    if config.model.checkpoint is None:
        raise UserError(
            f"--format checkpoint hands back a run that started from a checkpoint directory "
            f"([model] checkpoint), and {shown(run)} trained from scratch; export it with "
            "--format hf (or fixedfirst's own format)"
        )
    if adapters == "alone" and getattr(config.train, "lowrank", None) is None:
        raise UserError(
            "--adapters alone saves a run's low-rank adapters, and this run trained every "
            "weight ([train.lowrank] unset); leave --adapters out"
        )
    # Before and after, for the card (read back when `fixedfirst finish` or `eval` saved it).
    evaluation, _ = cached_evaluation(run, config.eval.depths, HeldOut(), "cpu", base=True)
    card = card_facts(run, config, evaluation, adapters)
    if not isinstance(config.model, TransformersModelConfig):
        from fixedfirst.export.hf import export_hf

        export_hf(run, out, ckpt.step, depth=card["default_depth"], card=model_card(card))
        return card
    loaded = load_any_run(run, ckpt.step)
    assert isinstance(loaded.model, TransformersLoop)
    network = handed_back(loaded.model, adapters, config.model.checkpoint_depth)
    tokenizer = tokenizer_source(Path(run), config)

    def fill(directory: Path) -> None:
        with quiet_transformers():
            if is_lowrank(network):  # `adapters = "alone"`: peft's files, no base weights
                save_adapters(network, directory)
            else:
                network.save_pretrained(str(directory), safe_serialization=True)
        if tokenizer is not None:
            tokenizer.hf.save_pretrained(str(directory))
        (directory / CARD).write_text(model_card(card), encoding="utf-8")

    write_directory(out, fill)
    return card


def handed_back(model: TransformersLoop, adapters: Adapters, native: int | None) -> Any:
    """The transformers model to save: the network itself, its low-rank adapters merged in,
    or (`alone`) still carrying them, to be saved by peft. Its default depth set back to the
    checkpoint's."""
    if native is not None:
        model.handle.set_depth(native)
    if not is_lowrank(model.network) or adapters == "alone":
        return model.network
    return merge_lowrank(model.network)


def tokenizer_source(run: Path, config: RunConfig) -> CheckpointTokenizer | None:
    """The tokenizer to hand back: the run's copy (the checkpoint's own, checked when the run
    started), or for a run on data without text the checkpoint directory's, if it is there."""
    copy = run / TOKENIZER_DIR
    if (copy / DESCRIPTION_FILE).is_file():
        return CheckpointTokenizer.load(copy)
    base = config.model.checkpoint
    if base is not None and Path(base).is_dir():
        try:
            return CheckpointTokenizer.load(base)
        except UserError:
            return None
    return None


def card_facts(
    run: str | Path, config: RunConfig, evaluation: dict[str, Any], adapters: Adapters
) -> dict[str, Any]:
    """What the model card says: where the model came from, how it was finished, its profile."""
    lowrank = config.train.lowrank
    model = config.model
    if isinstance(model, TransformersModelConfig):
        name, depth_key = model.architecture, looped_architecture(model.architecture).depth_key
    else:
        name, depth_key = "FixedFirstForCausalLM", OWN_DEPTH_KEY
    schedule = config.schedule
    shallowest = schedule.depth if schedule.kind == "fixed" else schedule.k_min
    return {
        "class": name,
        "depth_key": depth_key,
        "default_depth": model.checkpoint_depth or 1,
        "checkpoint": str(model.checkpoint),
        "checkpoint_sha256": model.checkpoint_sha256,
        "run": str(run),
        "step": evaluation["step"],
        "tokens": evaluation["tokens"],
        "schedule": describe(schedule),
        "finished_for": [shallowest, deepest_training_depth(config)],
        "lr": config.train.lr,
        "data": evaluation["data"],
        "profile": table(evaluation),
        "before": evaluation.get("base") is not None,
        "scored": f"{evaluation['scored_tokens']:,} held-out tokens in "
        f"{len(evaluation['row_tokens'])} blocks",
        "remote_code": not isinstance(model, TransformersModelConfig),
        "lowrank_rank": None if lowrank is None else lowrank.rank,
        "adapters_alone": lowrank is not None and adapters == "alone",
    }


def model_card(facts: dict[str, Any]) -> str:
    """README.md of the handed-back checkpoint."""
    low, high = facts["finished_for"]
    remote = ", trust_remote_code=True" if facts["remote_code"] else ""
    key, native = facts["depth_key"], facts["default_depth"]
    imports = "from transformers import AutoModelForCausalLM, AutoTokenizer"
    load = f"model = AutoModelForCausalLM.from_pretrained(path{remote})"
    config = "model.config"
    rank = facts["lowrank_rank"]
    what = "" if rank is None else f" with low-rank adapters of rank {rank}"
    alone = ""
    if facts["adapters_alone"]:
        alone = (
            "\n\nThis directory holds the adapters alone, in peft's format: load them on top of "
            "the checkpoint,\nas below."
        )
        imports = f"from peft import PeftModel\n{imports}"
        load = (
            f'base = AutoModelForCausalLM.from_pretrained("{facts["checkpoint"]}")\n'
            "model = PeftModel.from_pretrained(base, path)  # the adapters, on the checkpoint"
        )
        config = "base.config"
    set_depth = f"{config}.{key} = {high}  # any depth; {native} by default"
    profile = "\n".join(facts["profile"])
    before = (
        '"checkpoint" is the model it was finished from, scored on the same blocks, and the\n'
        "change (this model minus it) is paired block by block."
        if facts["before"]
        else "The checkpoint it was finished from was not scored: its directory was not where\n"
        "the run recorded it when this card was written."
    )
    return f"""---
library_name: transformers
tags: [looped-transformer, adaptive-depth, fixedfirst]
---
# {Path(facts["checkpoint"]).name}, finished for depths {low}..{high}

`{facts["class"]}` from `{facts["checkpoint"]}` (weights SHA-256 `{facts["checkpoint_sha256"]}`),
trained at {native} loop passes, trained on for {facts["tokens"]:,} tokens at {facts["schedule"]}
(learning rate {facts["lr"]:g}) by fixedfirst{what}, so that it serves at every depth of
{low}..{high} rather than at {native} alone. Run: `{facts["run"]}`, step {facts["step"]}.{alone}

## Profile by depth, before and after

Held-out NLL (nats/token) on {facts["scored"]} of the validation split of {facts["data"]}, with
95% intervals over the blocks. {before}

{profile}

## Use

```python
{imports}

path = "."  # this directory
{load}
tokenizer = AutoTokenizer.from_pretrained(path)
{set_depth}
```

It serves {native} loop passes by default (config.json's `{key}`, the checkpoint's), so it is a
drop-in replacement; a smaller depth costs less per token, a larger one more.
"""
