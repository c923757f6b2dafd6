"""What defines a run, and the check that a resume keeps it (docs/design.md §7).

A run is its model, its data (what it is, not where it lives), its schedule and its training:
seed, budgets, batch and sequence length, the optimizer and its learning-rate curve, truncated
backprop; with `schedule.switch = "auto"` also the [switch] rule and `train.log_every`, whose
logged losses the rule reads. The rest may change on resume: where and how the same arithmetic
runs (device, precision, compilation, threads, strategy, micro-batches, activation
checkpointing, the memory check before the first step), what is logged and kept (log lines,
checkpoints, snapshots, sinks) and evaluation. A key that MAY_CHANGE does not name defines the
run, so a new setting is safe.

Every checkpoint stores the configuration it was trained with (meta.json's `config`, as
config.toml stores it): the run's fingerprint, which an edited config.toml cannot change. A resume
compares the configuration it is given (config.toml, edited or not, with --set) with it and
refuses a change in one line naming the keys. Continuing from a checkpoint with other settings is
a new run: `fixedfirst branch` (`branch.py`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fixedfirst.config import RunConfig
from fixedfirst.errors import UserError
from fixedfirst.files.paths import shown
from fixedfirst.model.pretrained import weights_sha256

MAY_CHANGE = frozenset(
    f"train.{key}"
    for key in (
        "micro_batch_size",
        "device",
        "precision",
        "compile",
        "checkpoint_activations",
        "check_memory",
        "threads",
        "strategy",
        "log_every",
        "checkpoint_every",
        "keep_checkpoints",
        "snapshots",
        "log_to",
        "log_axis",
    )
) | {"data.path", "model.checkpoint"}
"""[train], [data] and [model] keys a resume may change (where the data and the checkpoint
are, not what they are: their fingerprint and checksum define the run); every [eval] key may
change too."""

CONFIG_KEY = "config"
"""meta.json's key for the configuration a checkpoint was trained with."""


def identity(config: RunConfig) -> dict[str, Any]:
    """What defines the run, as flat `section.key` (a data kind's options `data.KIND.key`) ->
    value, from the configuration resolved as a run stores it."""
    from fixedfirst.data.registry import resolve_data

    resolved = identified(resolve_data(config))
    sections = resolved.to_dict()
    auto = resolved.schedule.auto_switch
    out: dict[str, Any] = {}
    for section in ("model", "schedule", "train", "data") + (("switch",) if auto else ()):
        for key, value in sections[section].items():
            if isinstance(value, dict):
                out.update({f"{section}.{key}.{k}": v for k, v in value.items()})
            else:
                out[f"{section}.{key}"] = value
    for key in MAY_CHANGE - ({"train.log_every"} if auto else set()):
        out.pop(key, None)
    return out


def identified(config: RunConfig) -> RunConfig:
    """`config` with its checkpoint's checksum where it records none (a configuration as written,
    compared with a run's record); a recorded one is taken as it is, without reading the
    weights (a finished run compares without its checkpoint)."""
    if config.model.checkpoint is None or config.model.checkpoint_sha256 is not None:
        return config
    return with_checkpoint_identity(config)


def with_checkpoint_identity(config: RunConfig) -> RunConfig:
    """`config` with the checksum of the weights of the checkpoint its [model] starts from:
    computed when the configuration records none (a new run), checked when it does (a resume,
    a copied config.toml), so that a run never goes on from weights other than those it
    started from. Unchanged without a checkpoint."""
    model = config.model
    if model.checkpoint is None:
        return config
    found = weights_sha256(model.checkpoint)
    recorded = model.checkpoint_sha256
    if recorded is not None and recorded != found:
        raise UserError(
            f"model.checkpoint = {shown(model.checkpoint)}: its weights are not those this run "
            f"started from (SHA-256 {found[:16]}... now, {recorded[:16]}... in "
            "model.checkpoint_sha256); a run goes on from the weights it started from: point "
            "model.checkpoint at them, or start a new run from these (without "
            "checkpoint_sha256)"
        )
    return replace(config, model=replace(model, checkpoint_sha256=found))


def run_defining_differences(saved: RunConfig, new: RunConfig) -> list[str]:
    """The keys that define the run and differ between `saved` and `new`, sorted."""
    a, b = identity(saved), identity(new)
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


def describe_differences(saved: RunConfig, new: RunConfig, limit: int = 3) -> str:
    """'train.lr (0.003 in the run, 0.001 now), ...' for the first `limit` differing keys."""
    a, b = identity(saved), identity(new)
    keys = run_defining_differences(saved, new)
    shown = [f"{k} ({a.get(k, 'unset')!s} in the run, {b.get(k, 'unset')!s} now)" for k in keys]
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return ", ".join(shown[:limit]) + more


def stored_config(meta: dict[str, Any], where: str) -> RunConfig | None:
    """The configuration a checkpoint's meta.json stores (None in checkpoints written before
    they stored it); `where` names the checkpoint in an error."""
    raw = meta.get(CONFIG_KEY)
    if raw is None:
        return None
    try:
        return RunConfig.from_dict(raw)
    except (UserError, TypeError, AttributeError) as e:
        raise UserError(f"{where}: its stored configuration cannot be read ({e})") from None


def check_same_run(saved: RunConfig, new: RunConfig, where: str, run: str) -> None:
    """Refuse to resume with a configuration that changes what defines the run."""
    if not run_defining_differences(saved, new):
        return
    raise UserError(
        f"cannot resume: what defines the run changed since {where}: "
        f"{describe_differences(saved, new)}; a resume continues the same run: undo the change "
        f"(in {run}/config.toml or --set), or branch a new run from that checkpoint: "
        f"`fixedfirst branch {run} --out NEW_RUN --set KEY=VALUE`"
    )
