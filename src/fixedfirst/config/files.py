"""Configuration files and command-line overrides.

A run is described by one TOML file with the sections `[model]`, `[schedule]`, `[train]`, `[data]`
(plus the data kind's own `[data.KIND]`) and `[eval]`; every command also takes
`--set section.key=value` overrides (`--set data.KIND.key=value` for a kind's option). Loading
checks that every key exists, has the field's type and is possible, and names the offending key
in a one-line `UserError` when not (see `schema` and `sections`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from fixedfirst.config.run import RunConfig, section_names
from fixedfirst.config.schema import toml_value
from fixedfirst.config.sections import ScheduleConfig
from fixedfirst.errors import UserError
from fixedfirst.files.paths import resolve_paths

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def parse_override(text: str) -> tuple[str, str, Any]:
    """Split `section.key=value` (key may be `KIND.option` in [data], `transformers.key` in
    [model]); the value is read as TOML, or else taken as a bare string."""
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
    merged = {
        k: {kk: dict(vv) if isinstance(vv, dict) else vv for kk, vv in v.items()}
        if isinstance(v, dict)
        else v
        for k, v in data.items()
    }
    for text in overrides:
        section, key, value = parse_override(text)
        if section not in section_names():
            raise UserError(
                f"--set {text!r}: unknown section [{section}]; valid sections: "
                + ", ".join(section_names())
            )
        table = merged.setdefault(section, {})
        if "." in key:  # a nested table: data.KIND.option, model.transformers.key
            sub, key = key.split(".", 1)
            if section not in ("data", "model", "train") or "." in key:
                raise UserError(
                    f"--set {text!r}: only [data], [model] and [train] have nested tables "
                    "(data.KIND.option, model.transformers.key, train.lowrank.key)"
                )
            nested = table.setdefault(sub, {})
            if not isinstance(nested, dict):
                raise UserError(f"--set {text!r}: {section}.{sub} is not a table")
            nested[key] = value
        else:
            table[key] = value
    return merged


def merge_tables(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """A copy of `base` with `top`'s keys on top, where a table in both is merged key by key, so
    `data.bios.people = 300` changes one option of a base's [data.bios] (as --set does) rather
    than dropping the others."""
    out = dict(base)
    for key, value in top.items():
        below = out.get(key)
        if isinstance(value, dict) and isinstance(below, dict):
            out[key] = merge_tables(below, value)
        else:
            out[key] = value
    return out


def read_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML file, turning a missing file or a syntax error into a one-line UserError."""
    p = Path(path)
    if p.is_dir():
        raise UserError(f"config file {str(p)!r} is a directory, not a TOML file")
    if not p.exists():
        raise UserError(f"config file {str(p)!r} does not exist")
    if not (p.is_file() or p.is_fifo()):  # a pipe is read: `<(...)` in a shell
        raise UserError(f"config file {str(p)!r} is not a regular file (a device or a socket)")
    try:
        text = p.read_text(encoding="utf-8")
        if text.startswith("\ufeff"):
            raise UserError(
                f"{p}: starts with a byte-order mark (BOM), which TOML does not allow; save it "
                "as UTF-8 without BOM"
            )
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{p}: TOML syntax error: {e}") from None
    except UnicodeDecodeError:
        raise UserError(f"{p}: not a UTF-8 text file") from None


SWEEP_KEYS = ("base", "sweep", "runs", "claims")
"""Top-level keys of a sweep file (docs/reference/files.md), never of a run configuration."""


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    written: bool = False,
) -> RunConfig:
    """Load a run configuration from a TOML file (or the defaults) plus `--set` overrides.

    A relative data.path in the file is relative to the file's directory; one given with
    `--set` is relative to the working directory, where it was typed. `written`: the file and
    overrides are what the user wrote (not a run's config.toml, which lists every key), so a
    schedule key its schedule never reads is refused rather than silently ignored."""
    data = {}
    if path is not None:
        data = resolve_paths(read_toml(path), Path(path).parent)
        sweep = [key for key in SWEEP_KEYS if key in data]
        if sweep:
            raise UserError(
                f"{path} is a sweep file (it has {', '.join(sweep)}), not a run configuration: "
                f"`fixedfirst sweep {path} --out DIR` runs it; give this command one run's "
                "configuration (the sweep's base file, for one)"
            )
    config = RunConfig.from_dict(apply_overrides(data, overrides or []))
    if written:
        _refuse_unused_keys(config, data, overrides or [])
    return config


def _refuse_unused_keys(config: RunConfig, data: dict[str, Any], overrides: list[str]) -> None:
    """Refuse a schedule key the schedule it was written for never reads: a key of the file
    that the file's own schedule ignores, a `--set` key that the final one ignores (a `--set`
    of another kind leaves the file's keys alone: the file still says what it meant), and
    [switch] without schedule.switch = 'auto'."""
    written = data.get("schedule", {}) if isinstance(data.get("schedule"), dict) else {}
    kind = written.get("kind", ScheduleConfig.kind)
    finish = written.get("finish", ScheduleConfig.finish)
    unused = [
        (key, written[key], kind) for key in ScheduleConfig.unused(list(written), kind, finish)
    ]
    final = config.schedule
    for override in overrides:
        section, key, value = parse_override(override)
        if section == "schedule" and ScheduleConfig.unused([key], final.kind, final.finish):
            unused.append((key, value, final.kind))
    if unused:
        key, value, kind = unused[0]
        raise UserError(
            f"schedule.{key} = {toml_value(value)} does nothing with schedule.kind = {kind!r}: "
            f"it is read only with {ScheduleConfig.ONLY_FOR[key]}; remove it, or change "
            "schedule.kind"
        )
    switch = data.get("switch")
    if isinstance(switch, dict) and switch and not final.auto_switch:
        how = f", switch = {final.switch}" if final.kind == "fixed-first" else ""
        raise UserError(
            f"[switch] sets how schedule.switch = 'auto' decides, and this schedule does not "
            f"switch by itself (schedule.kind = {final.kind!r}{how}); remove [switch], or set "
            "schedule.switch = 'auto'"
        )


def to_toml(config: RunConfig) -> str:
    """The resolved configuration as TOML text (unset optional keys are left out); a nested
    table such as [data.bios] follows its section's own keys."""
    lines: list[str] = []
    for name, section in config.to_dict().items():
        lines.append(f"[{name}]")
        tables = {k: v for k, v in section.items() if isinstance(v, dict)}
        lines.extend(f"{k} = {toml_value(v)}" for k, v in section.items() if k not in tables)
        lines.append("")
        for sub, values in tables.items():
            lines.append(f"[{name}.{sub}]")
            lines.extend(f"{k} = {toml_value(v)}" for k, v in values.items())
            lines.append("")
    return "\n".join(lines)
