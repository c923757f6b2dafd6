"""Bad inputs of `fixedfirst frontier` and `fixedfirst serving-economics`, run like every other
case of tests/bad_input_cases.py (which lists them in its table, docs/reference/bad-input.md)."""

from __future__ import annotations

from pathlib import Path

from tests.bad_input_cases import Case, earlier_export

FRONTIER = ["frontier", "tokens-run", "--out", "frontier"]
RUN = ("tokens-run", "data")

ECONOMICS = """
[[studies]]
name = "chains"
directory = "runs/chains"
seeds = [0, 1]

[studies.arms]
"uniform" = "uniform-1-16"
"fixed-first K0=2" = "fixed-first-2-0.67"

[[comparisons]]
a = "fixed-first K0=2"
b = "uniform"
"""


def remove_data(work: Path) -> None:
    for path in sorted((work / "data").rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    (work / "data").rmdir()


FRONTIER_CASES: list[Case] = [
    Case(
        "frontier-no-run",
        "frontier",
        "`frontier` of a run directory that does not exist",
        ["frontier", "nowhere"],
        "nowhere: no such run directory or export",
    ),
    Case(
        "frontier-thresholds-empty",
        "frontier",
        "`frontier --exit kl=` (a rule with no thresholds to sweep)",
        [*FRONTIER, "--exit", "kl="],
        "the threshold list is empty; give at least one",
        needs=RUN,
    ),
    Case(
        "frontier-threshold-negative",
        "frontier",
        "`frontier --exit kl=0.01,-0.001` (a negative threshold)",
        [*FRONTIER, "--exit", "kl=0.01,-0.001"],
        "the KL threshold must be a finite number >= 0, got -0.001",
        needs=RUN,
    ),
    Case(
        "frontier-exit-unknown",
        "frontier",
        "`frontier --exit latent=0.1` (an exit rule that does not exist)",
        [*FRONTIER, "--exit", "latent=0.1"],
        "unknown exit rule 'latent'",
        needs=RUN,
    ),
    Case(
        "frontier-export-without-data",
        "frontier",
        "`frontier` of an export without --data (it holds no held-out set)",
        ["frontier", "exported", "--out", "frontier"],
        "exported is an export: it holds no held-out data to score on; give --data DIR",
        setup=earlier_export,
    ),
    Case(
        "frontier-rows-beyond-split",
        "frontier",
        "`frontier --rows 5000` on a run whose validation split holds fewer rows",
        [*FRONTIER, "--rows", "5000"],
        "fewer than the 5000 held-out rows asked for",
        needs=RUN,
    ),
    Case(
        "frontier-data-gone",
        "frontier",
        "`frontier` of a run whose data directory was deleted (no held-out set to draw)",
        FRONTIER,
        "is not at",
        needs=RUN,
        setup=remove_data,
    ),
    Case(
        "economics-primary-unknown-arm",
        "serving-economics",
        "a [[primary]] naming an arm its study does not train",
        ["serving-economics", "economics.toml", "--out", "economics"],
        "primary[0]: the study 'chains' has no arm 'fixed K=4'",
        files={
            "economics.toml": ECONOMICS
            + '\n[[primary]]\nname = "x"\nstudy = "chains"\na = "fixed K=4"\nb = "uniform"\n'
        },
    ),
    Case(
        "economics-thresholds-empty",
        "serving-economics",
        "`[frontier.exits] kl = []` (a rule with no thresholds to sweep)",
        ["serving-economics", "economics.toml", "--out", "economics"],
        "frontier.exits.kl: give a list of at least one threshold",
        files={"economics.toml": "[frontier.exits]\nkl = []\n" + ECONOMICS},
    ),
    Case(
        "economics-jobs-zero",
        "serving-economics",
        "`--jobs 0` (no worker to measure the frontiers)",
        ["serving-economics", "economics.toml", "--out", "economics", "--jobs", "0"],
        "--jobs must be >= 1, got 0",
        files={"economics.toml": ECONOMICS},
    ),
]
