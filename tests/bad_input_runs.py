"""What a newcomer hit with runs and exports (issue 57), as bad-input cases.

`RUN_CASES` are refusals (the bad-input table: `all_cases` in tests/bad_input_cases.py),
`RUN_NOTICES` are commands that go on and say what they found (`all_notices` in
tests/bad_input_newcomer.py). Behaviour the table cannot show (a run that trains while it is
exported, a disk full between a page and its picture, a torn metrics file) is tested in
tests/test_runs_newcomer.py and tests/test_metrics_resume.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from tests.bad_input_cases import Case, bad_config, flip_byte, inside
from tests.bad_input_newcomer import Notice

GENERATE_EXPORTED = ["generate", "exported", "--prompt", "river stone"]


def export_of_tokens_run(work: Path) -> None:
    """`fixedfirst export tokens-run --out exported`, run in the case's directory."""
    from fixedfirst.export.writer import export_run

    with inside(work):
        export_run("tokens-run", "exported")


def with_flipped_weights(work: Path) -> None:
    export_of_tokens_run(work)
    flip_byte(work / "exported" / "model.safetensors")


def without_config_json(work: Path) -> None:
    export_of_tokens_run(work)
    (work / "exported" / "config.json").unlink()


def without_tokenizer(work: Path) -> None:
    export_of_tokens_run(work)
    shutil.rmtree(work / "exported" / "tokenizer")


def evaluated_at_1_and_2(work: Path) -> None:
    """`fixedfirst eval run --depths 1,2`, run in the case's directory (its results file)."""
    import contextlib
    import io

    from fixedfirst.cli.main import main

    with inside(work), contextlib.redirect_stdout(io.StringIO()):
        try:
            main(["eval", "run", "--depths", "1,2"])
        except SystemExit as done:
            assert done.code in (0, None)


RUN_CASES: list[Case] = [
    Case(
        "eval-again-at-other-depths",
        "eval",
        "`eval run --depths 4,8 --batches 2` after `eval run --depths 1,2` (other rows: the "
        "second results file replaced the first without a word; at the same rows they join)",
        ["eval", "run", "--depths", "4,8", "--batches", "2"],
        "run/eval-step-0000008.json holds the evaluation at depths 1,2 of other weights, rows or "
        "precision, which this one at 4,8 would replace: give --out FILE",
        needs=("run",),
        setup=evaluated_at_1_and_2,
    ),
    Case(
        "generate-export-flipped-byte",
        "export",
        "`generate` from an export whose model.safetensors had one byte flipped (it generated "
        "without a word)",
        GENERATE_EXPORTED,
        "exported/model.safetensors: changed since `fixedfirst export` wrote it (its SHA-256 is "
        "not the weights_sha256 in config.json",
        needs=("tokens-run", "data"),
        setup=with_flipped_weights,
    ),
    Case(
        "generate-export-without-config",
        "export",
        "`generate` from an export copied without its config.json (it was called a run to "
        "`train` into)",
        GENERATE_EXPORTED,
        "exported: an export's weights (model.safetensors) without its config.json; copy the "
        "export again whole",
        needs=("tokens-run", "data"),
        setup=without_config_json,
    ),
    Case(
        "generate-export-without-tokenizer",
        "export",
        "`generate` from an export copied without its tokenizer/ (it was told to `prepare` data)",
        GENERATE_EXPORTED,
        "exported: this export's tokenizer (exported/tokenizer/fixedfirst-tokenizer.json) is "
        "missing; copy the export again with its tokenizer/",
        needs=("tokens-run", "data"),
        setup=without_tokenizer,
    ),
    Case(
        "generate-device-cuda",
        "command line",
        "`generate --device cuda` on a machine without a GPU (it blamed train.device)",
        [*GENERATE_EXPORTED[:1], "tokens-run", "--prompt", "river", "--device", "cuda"],
        "--device cuda but no CUDA device is here; use 'auto' or 'cpu'",
        needs=("tokens-run", "data"),
        skip="this machine has a GPU" if torch.cuda.is_available() else None,
    ),
    Case(
        "branch-into-itself",
        "branch",
        "`branch run --out run` (it advised --resume, which branch does not take)",
        ["branch", "run", "--out", "run", "--set", "train.lr=0.001"],
        "--out run is the run being branched; a branch is a new run beside it: choose another "
        "--out",
        needs=("run",),
    ),
    Case(
        "branch-into-another-run",
        "branch",
        "`branch run --out wide-run`, a directory holding another run",
        ["branch", "run", "--out", "wide-run", "--set", "train.lr=0.001"],
        "--out wide-run already holds a run; a branch is a new run: choose another --out",
        needs=("run", "wide-run"),
    ),
    bad_config(
        "switch-leaves-no-finish",
        "a fixed-first switch so late that no step is left after it (it was reported as "
        "fixed-first with its modeled savings)",
        "[schedule]\nswitch = 0.999\n",
        "schedule.switch = 0.999 of 488 steps leaves 0 finishing steps",
    ),
]

RUN_NOTICES: list[Notice] = [
    Notice(
        "compute-switch-leaves-no-finish",
        "compute",
        "`compute` of a fixed-first run whose switch leaves no step after it",
        ["compute", "tiny.toml", "--set", "schedule.switch=0.99"],
        "note: schedule.switch = 0.99 of 48 steps leaves 0 finishing steps",
        needs=("tiny.toml",),
    ),
    Notice(
        "compute-passes-over-data",
        "compute",
        "`compute` of a budget that reads the training data 7 times (said nowhere)",
        ["compute", "tokens.toml", "--set", "train.tokens=200000"],
        "note: the budget's ",
        needs=("tokens.toml", "data"),
    ),
]
