"""The serving-economics study's configuration (configs/serving-economics.toml), validated.

    [frontier]          what each run's frontier measures (`FrontierSettings`), with
    [frontier.exits]    each exit rule's thresholds
    [[studies]]         a study directory whose runs are DIR/runs/NAME-seedS (chains, a sweep):
                        its name, directory, seeds and [studies.arms] (arm = run NAME)
    [[comparisons]]     arm a against arm b, in every study that has both
    [[primary]]         the comparisons named before the runs, each decided by its own interval
                        (both claims of the study kit, `COMPARISONS` and `PRIMARY`)

Directories are relative to where the command runs. Everything is checked before any run is
read, and a mistake is one line naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Literal

from fixedfirst.config.files import read_toml
from fixedfirst.config.schema import build_section, coerce
from fixedfirst.errors import UserError
from fixedfirst.studies.kit.claims import Claim, ClaimTable
from fixedfirst.studies.kit.settings import check_seeds
from fixedfirst.studies.serving.frontier import FrontierSettings

Quantity = Literal["saved", "saved_by_exit"]
QUANTITIES: tuple[Quantity, ...] = ("saved", "saved_by_exit")
"""Compute saved at matched quality against the best fixed depth, and what exiting saves beyond
the cheapest fixed depth that matches (serve/pareto.py)."""
ComputeName = Literal["iterations", "flops"]
COMPUTES: tuple[ComputeName, ...] = ("iterations", "flops")


@dataclass
class StudyRuns:
    """A `[[studies]]` table: where a study's runs are and which arm each run name is."""

    SECTION: ClassVar[str] = "studies"

    name: str
    """How the report names the study ("chains", "language model")."""
    directory: str
    """The study's --out: its runs are DIRECTORY/runs/NAME-seedS."""
    seeds: list[int]
    arms: dict[str, str] = field(default_factory=dict)
    """Arm -> the run NAME it trains (the arms are what comparisons name)."""

    def run_path(self, arm: str, seed: int) -> Path:
        return Path(self.directory) / "runs" / f"{self.arms[arm]}-seed{seed}"


COMPARISONS = ClaimTable(
    "comparisons",
    "A `[[comparisons]]` table: arm a against arm b, paired by seed, in every study that has "
    "both (exploratory, unless a primary names it).",
    {"a": "a", "b": "b"},
    ("a", "b"),
    fixed={"name": "", "primary": False},
)
PRIMARY = ClaimTable(
    "primary",
    "A `[[primary]]` table: one comparison of one study, named before the runs, decided by its "
    "own 95% interval over seeds (higher, lower, or cannot tell).",
    {
        "name": "name",
        "study": "within",
        "a": "a",
        "b": "b",
        "quantity": "of",
        "compute": "unit",
    },
    ("name", "study", "a", "b"),
    choices={"quantity": QUANTITIES, "compute": COMPUTES},
    defaults={"quantity": "saved", "compute": "iterations"},
)


@dataclass
class EconomicsConfig:
    frontier: FrontierSettings
    studies: list[StudyRuns]
    comparisons: list[Claim]
    primary: list[Claim]
    path: str


def _arms(raw: Any, where: str) -> dict[str, str]:
    if not isinstance(raw, dict) or not raw:
        raise UserError(f'{where}.arms: a table of arm = "RUN NAME" lines, at least one')
    for arm, run in raw.items():
        if not isinstance(run, str) or not run.strip():
            raise UserError(f"{where}.arms.{arm}: expected the run's name, got {run!r}")
    return dict(raw)


def frontier_settings(raw: Any) -> FrontierSettings:
    """[frontier] with its [frontier.exits] table."""
    if not isinstance(raw, dict):
        raise UserError("[frontier]: expected a table")
    raw = dict(raw)
    exits = raw.pop("exits", None)
    settings = build_section(FrontierSettings, raw)
    if exits is None:
        return settings
    if not isinstance(exits, dict):
        raise UserError("frontier.exits: expected a table of RULE = [thresholds] lines")
    listed = {name: coerce(v, list[float], f"frontier.exits.{name}") for name, v in exits.items()}
    return replace(settings, exits=listed)


def load_economics(path: str | Path) -> EconomicsConfig:
    raw = read_toml(path)
    known = {"frontier", "studies", "comparisons", "primary"}
    for key in raw:
        if key not in known:
            raise UserError(f"{path}: unknown table [{key}]; expected {', '.join(sorted(known))}")
    settings = frontier_settings(raw.get("frontier", {}))
    studies = []
    for i, entry in enumerate(_tables(raw, "studies")):
        where = f"studies[{i}]"
        entry = dict(entry)
        arms = _arms(entry.pop("arms", None), where)
        study = build_section(StudyRuns, entry)
        study.arms = arms
        check_seeds(study.seeds, f"{where}.seeds")
        studies.append(study)
    if not studies:
        raise UserError(f"{path}: name at least one [[studies]] table")
    names = [s.name for s in studies]
    if len(set(names)) != len(names):
        raise UserError(f"studies: every study needs its own name, got {names}")
    trained = {arm for s in studies for arm in s.arms}
    comparisons = [COMPARISONS.read(c) for c in _tables(raw, "comparisons")]
    for i, c in enumerate(comparisons):
        for side in (c.a, c.b):
            if side not in trained:
                listed = ", ".join(sorted(trained))
                raise UserError(f"comparisons[{i}]: no study has the arm {side!r} (arms: {listed})")
    primary = [PRIMARY.read(p) for p in _tables(raw, "primary")]
    by_name = {s.name: s for s in studies}
    for i, p in enumerate(primary):
        study = by_name.get(p.within or "")
        if study is None:
            raise UserError(f"primary[{i}].study: no study named {p.within!r} ({', '.join(names)})")
        for side in (p.a, p.b):
            if side not in study.arms:
                raise UserError(f"primary[{i}]: the study {p.within!r} has no arm {side!r}")
        if (p.a, p.b) not in {(c.a, c.b) for c in comparisons}:
            raise UserError(f"primary[{i}]: {p.a} against {p.b} is not among the [[comparisons]]")
    if len({p.name for p in primary}) != len(primary):
        raise UserError("primary: every comparison needs its own name")
    return EconomicsConfig(settings, studies, comparisons, primary, str(path))


def _tables(raw: dict[str, Any], key: str) -> list[dict[str, Any]]:
    tables = raw.get(key, [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise UserError(f"[[{key}]]: expected a list of tables")
    return tables
