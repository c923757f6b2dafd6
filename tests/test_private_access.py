"""No module reaches into another module's private members (docs/design.md §16).

The rule, read from each file's syntax tree: a name with one leading underscore (`_x`, not a
dunder) belongs to the module that defines it. A module may use `_x`

- on `self` or `cls` (an object's own members, inherited ones included),
- on `super()` (a method extending the base class's hook it overrides, e.g. transformers'
  `_init_weights`),
- on anything, when the module itself defines a `_x`: a function, class or method of that name,
  or an attribute it assigns (`self._x = ...`, `obj._x = ...`): privacy is per module, so a
  class may read `_memo` of another instance of itself, and a module its own helpers.

Everything else is a violation: `model._prelude(...)` from serve/, `from fixedfirst.a import _b`,
and `getattr(obj, "_x")` / `hasattr` / `setattr` with a literal private name (the same access,
spelled as a string). Without types the check cannot tell whose `_x` an attribute is, so it errs
towards the module's own names; a module that defines a `_x` of its own and also reaches for a
foreign `_x` would pass, which the names in this package make unlikely.

A few members of other libraries have no public spelling; each such use is listed in
THIRD_PARTY with the reason, so a new one is a decision, not an accident.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

THIRD_PARTY: dict[tuple[str, str], str] = {
    (
        "fixedfirst/export/hf/modeling_fixedfirst.py",
        "_is_hf_initialized",
    ): "transformers marks initialised tensors with it; the model's `_init_weights` must skip them",
    (
        "fixedfirst/config/architectures.py",
        "_can_compile_fullgraph",
    ): "transformers' declaration that a model cannot compile as one graph; no public spelling",
    (
        "fixedfirst/data/documents.py",
        "_fingerprint",
    ): "a datasets.Dataset's content hash: the only way to tell a changed dataset from the same",
    (
        "fixedfirst/model/keep_float32.py",
        "_keep_in_fp32_modules_strict",
    ): "transformers' declaration of the weights a model keeps in float32; no public spelling",
    (
        "fixedfirst/compute/measured.py",
        "_grouped_mm",
    ): "torch's op for a mixture's experts, which its FLOP counter has no formula for",
}
"""(file under src/, private name) -> why that member of another library is used."""

ACCESSORS = ("getattr", "hasattr", "setattr", "delattr")


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def own_private_names(tree: ast.AST) -> set[str]:
    """Private names the module defines: its functions, classes and methods, the names it binds,
    and the attributes it assigns."""
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            own.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            own.add(node.target.id)
    return {name for name in own if is_private(name)}


def is_super_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"
    )


def private_accesses(source: str) -> list[tuple[int, str, str]]:
    """(line, member, how) for each access to another module's private member in `source`."""
    tree = ast.parse(source)
    own = own_private_names(tree)
    found: list[tuple[int, str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            target = node.value
            if isinstance(target, ast.Name) and target.id in ("self", "cls"):
                continue
            if is_super_call(target) or node.attr in own:
                continue
            found.append((node.lineno, node.attr, f"{ast.unparse(target)}.{node.attr}"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ACCESSORS
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and is_private(node.args[1].value)
            and node.args[1].value not in own
        ):
            member = node.args[1].value
            found.append((node.lineno, member, f"{node.func.id}(..., {member!r})"))
        elif isinstance(node, ast.ImportFrom):
            found.extend(
                (node.lineno, alias.name, f"from {node.module} import {alias.name}")
                for alias in node.names
                if is_private(alias.name)
            )
    return sorted(found)


def test_no_module_uses_another_modules_private_members():
    violations = []
    for path in sorted((SRC / "fixedfirst").rglob("*.py")):
        name = str(path.relative_to(SRC))
        for line, member, how in private_accesses(path.read_text()):
            if (name, member) not in THIRD_PARTY:
                violations.append(f"{name}:{line}: {how}")
    assert violations == []


def test_every_third_party_exception_is_still_used():
    """A stale entry would silently allow a new use of that name in that file."""
    for (name, member), why in THIRD_PARTY.items():
        found = private_accesses((SRC / name).read_text())
        assert member in {m for _, m, _ in found}, f"{name}: {member} ({why})"


def test_the_rule_catches_what_it_should_and_allows_what_it_should():
    source = """
from fixedfirst.model.looped import _helper
import torch


class Cache:
    def __init__(self):
        self._memo = None

    def same(self, other):
        return other._memo is self._memo


class Model(Base):
    def _init_weights(self, module):
        super()._init_weights(module)
        return cls._registry, self.__class__, type(self).__name__


def use(model, pool):
    model._prelude(1)
    getattr(pool, "_processes", None)
    hasattr(model, "_memo")
    return torch._dynamo
"""
    assert [(line, how) for line, _, how in private_accesses(source)] == [
        (2, "from fixedfirst.model.looped import _helper"),
        (21, "model._prelude"),
        (22, "getattr(..., '_processes')"),
        (24, "torch._dynamo"),
    ]
