"""Checking raw TOML values against the section dataclasses' annotations.

Every configuration section is a dataclass whose annotations say what each key accepts; `coerce`
turns a raw TOML value into that type (a table into a section dataclass, so a list of them is an
array of tables) or raises a one-line `UserError` naming the key, and
`build_section` refuses unknown keys before the dataclass's own `__post_init__` checks what is
possible. A section built in Python (`ScheduleConfig(switch=0.7)`) is held to the same types:
its `__post_init__` starts with `check_fields`, so a value the file would refuse (the string
"0.7", a misspelt choice) is refused in code too, in the same words. `field_docs` reads the
attribute docstrings, which are the configuration reference.
"""

from __future__ import annotations

import datetime
import itertools
import math
import types
import typing
from dataclasses import MISSING, Field, fields, is_dataclass
from typing import Annotated, Any, ClassVar, Literal, Protocol, Union

from fixedfirst.errors import UserError


class Section(Protocol):
    """A configuration section: a dataclass that names its TOML table (`SECTION`)."""

    SECTION: ClassVar[str]
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]


def require(ok: bool, key: str, message: str) -> None:
    """Raise `UserError("key: message")` unless `ok`."""
    if not ok:
        raise UserError(f"{key}: {message}")


def shown(value: Any) -> str:
    """A raw value as a message shows it: Python's repr, but a TOML date or time (what an
    unquoted 1979-05-27 is) as the text the user typed."""
    if isinstance(value, (datetime.date, datetime.time)):  # a datetime is a date too
        return f"the date-time {value.isoformat()} (quote it for a string)"
    return repr(value)


class Reader(Protocol):
    """What reads a value of its own (`Annotated[T, reader]` on a section's field): a study's
    claims, each study's table spelling the one claim type its own way."""

    def read(self, raw: Any) -> Any: ...


def coerce(value: Any, annotation: Any, key: str) -> Any:
    """Return `value` as the annotated type, or raise a UserError naming `key`."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Annotated:
        reader = next((a for a in args[1:] if callable(getattr(a, "read", None))), None)
        if reader is None:
            return coerce(value, args[0], key)
        try:
            return typing.cast(Reader, reader).read(value)
        except UserError as e:
            raise UserError(f"{key}: {e}") from None
    if origin in (Union, types.UnionType):
        is_none = value is None or (isinstance(value, str) and value.lower() == "none")
        if is_none and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return coerce(value, inner[0], key)
        for alternative in inner:  # e.g. bool | Literal["auto"]: the first that fits
            try:
                return coerce(value, alternative, key)
            except UserError:
                if _same_kind(value, alternative):  # e.g. inf for float | Literal["auto"]
                    raise
                continue
        raise UserError(f"{key}: expected {' or '.join(map(describe, inner))}, got {shown(value)}")
    if origin is Literal:
        if value not in args:
            choices = ", ".join(repr(a) for a in args)
            raise UserError(f"{key}: {shown(value)} is not one of {choices}")
        return value
    if origin is dict:  # a nested table whose keys its section checks (e.g. [model.transformers])
        if not isinstance(value, dict):
            raise UserError(f"{key}: expected a table of key = value lines, got {shown(value)}")
        return dict(value)
    if origin is list:
        if not isinstance(value, list):
            raise UserError(f"{key}: expected a list, got {shown(value)}")
        return [coerce(v, args[0], f"{key}[{i}]") for i, v in enumerate(value)]
    if annotation is bool:
        if not isinstance(value, bool):
            raise UserError(f"{key}: expected true or false, got {shown(value)}")
        return value
    if annotation is int:
        if isinstance(value, float) and value.is_integer() and math.isfinite(value):
            return int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise UserError(f"{key}: expected an integer, got {shown(value)}")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"{key}: expected a number, got {shown(value)}")
        if not math.isfinite(value):
            raise UserError(f"{key}: must be a finite number, got {shown(value)}")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise UserError(f"{key}: expected a string, got {shown(value)}")
        return value
    if is_dataclass(annotation) and hasattr(annotation, "SECTION"):  # a table, e.g. [[x.items]]
        if isinstance(value, typing.cast(type, annotation)):  # built in code, checked then
            return value
        if not isinstance(value, dict):
            raise UserError(f"{key}: expected a table of key = value lines, got {shown(value)}")
        try:
            return build_section(typing.cast(type[Section], annotation), value)
        except UserError as e:
            raise UserError(f"{key}: {e}") from None
    raise TypeError(f"unsupported annotation {annotation!r} for {key}")  # a bug, not user input


def _same_kind(value: Any, annotation: Any) -> bool:
    """Whether `value` is of `annotation`'s plain type, so that its own error says more than
    "expected one of the alternatives" (a number out of range, not a number at all)."""
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return annotation in (int, bool, str) and type(value) is annotation


def describe(annotation: Any) -> str:
    """What a value of `annotation` looks like, for an error message."""
    if typing.get_origin(annotation) is Literal:
        return " or ".join(repr(a) for a in typing.get_args(annotation))
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    return names.get(annotation, "a list" if typing.get_origin(annotation) is list else "?")


def build_section(section_cls: type[Section], raw: dict[str, Any]) -> Any:
    """Build one section dataclass from a dict of raw values, checking keys and types."""
    name = section_cls.SECTION
    hints = typing.get_type_hints(section_cls, include_extras=True)
    known = {f.name: f for f in fields(section_cls)}
    for key in raw:
        if key not in known:
            raise UserError(
                f"unknown key {name}.{key}; valid keys in [{name}]: " + ", ".join(sorted(known))
            )
    required = [
        f.name for f in known.values() if f.default is MISSING and f.default_factory is MISSING
    ]
    missing = [key for key in required if key not in raw]
    if missing:
        raise UserError(
            f"missing key {name}.{missing[0]}; [{name}] needs " + ", ".join(sorted(required))
        )
    values = {key: coerce(value, hints[key], f"{name}.{key}") for key, value in raw.items()}
    return section_cls(**values)


FIELD_TYPES: dict[type, dict[str, Any]] = {}
"""Every section's field annotations, resolved once per class (`field_types`)."""


def field_types(section_cls: type) -> dict[str, Any]:
    """The annotation of every field of a section."""
    if section_cls not in FIELD_TYPES:
        FIELD_TYPES[section_cls] = typing.get_type_hints(section_cls)
    return FIELD_TYPES[section_cls]


def check_fields(section: Any) -> None:
    """Hold a section built in code to the types its file would be: each field coerced by its
    annotation (an integer-valued float becomes the int, an int for a float the float) or
    refused in one line naming `SECTION.field`, as `build_section` refuses a raw value."""
    name = section.SECTION
    for f in fields(section):
        value = getattr(section, f.name)
        checked = coerce(value, field_types(type(section))[f.name], f"{name}.{f.name}")
        if checked is not value:
            object.__setattr__(section, f.name, checked)


def field_docs(section_cls: type[Section]) -> list[tuple[str, str, str]]:
    """(name, default, docstring) for every field, read from the attribute docstrings: the
    class's own, or a base class's where it gives none (a study's [experiment] keeps the words
    of the keys every study shares in their base)."""
    import ast
    import inspect
    import textwrap

    docs: dict[str, str] = {}
    for klass in reversed(section_cls.__mro__[:-1]):  # a subclass's words win over its base's
        if klass.__module__ in ("builtins", "abc", "typing"):
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        (definition,) = tree.body
        assert isinstance(definition, ast.ClassDef), (
            "inspect.getsource of a class is its definition"
        )
        for node, nxt in itertools.pairwise(definition.body):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
            ):
                docs[node.target.id] = " ".join(str(nxt.value.value).split())
    out = []
    for f in fields(section_cls):
        if f.metadata.get("table"):  # a nested table (data.options = [data.KIND]), not a key
            continue
        if f.default is not MISSING:
            default = f.default
        elif f.default_factory is not MISSING:
            default = f.default_factory()
        else:  # pragma: no cover
            default = None
        out.append((f.name, toml_value(default) if default is not None else "unset", docs[f.name]))
    return out


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")
