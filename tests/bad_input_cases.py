"""Every bad input we try, as data: what the user did, the command, what the message must say.

`tests/test_bad_input.py` runs each case through the real command line, in process, in a fresh
directory, and checks the contract: exit code 2, exactly one line on stderr, no traceback, the
expected words, nothing already on disk changed. `scripts/update_bad_input_table.py` runs the same
cases to write `docs/reference/bad-input.md`, and the test checks that each row there is what
the case prints now, so the table cannot drift from the code.

Paths in commands are relative: each case runs in its own directory, which holds copies of the
prebuilt things it names in `needs` (see `build_assets`), so messages show the paths a user typed.
The configuration cases of `tests/test_config.py` are part of the table too (`config_cases`).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
import torch

from tests.trainer_helpers import TINY_TOML

TOKENS_TOML = TINY_TOML.replace("vocab_size = 48", "vocab_size = 512") + (
    '\n[data]\nkind = "tokens"\npath = "data"\n'
)


@dataclass
class Case:
    id: str
    area: str
    """config, command line, checkpoint or data; or the command (sweep, bios, generate...)."""
    given: str
    """What the user did, in words (the table's first column)."""
    argv: list[str]
    fragment: str
    """Words the one-line error must contain."""
    needs: tuple[str, ...] = ()
    """Prebuilt things copied into the case's directory (names from `build_assets`)."""
    files: dict[str, str | bytes] = field(default_factory=dict)
    """Files written into the case's directory before it runs."""
    setup: Callable[[Path], None] | None = None
    """Damage done to the copies before the run (a flipped byte, an edited config...)."""
    skip: str | None = None
    """Why this case cannot run on this machine, if it cannot."""
    read_only: tuple[str, ...] = ()
    """Paths made read-only while the command runs (see tests/bad_input_edges.py)."""
    stand_in: Callable[[], contextlib.AbstractContextManager[None]] | None = None
    """Entered around the command: a library as another machine has it (an older release)."""


# -- damage ------------------------------------------------------------------------------------


def flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(data)


def checkpoint_dir(work: Path, run: str, step: int) -> Path:
    return work / run / "checkpoints" / f"step-{step:07d}"


def corrupt_every_checkpoint(work: Path) -> None:
    for ckpt in (work / "run" / "checkpoints").glob("step-*"):
        flip_byte(ckpt / "model.safetensors")


def wide_checkpoint_into_run(work: Path) -> None:
    """A newer checkpoint, copied in from a run of another width."""
    target = checkpoint_dir(work, "run", 12)
    shutil.copytree(checkpoint_dir(work, "wide-run", 4), target)
    meta = json.loads((target / "meta.json").read_text())
    meta["step"] = 12
    (target / "meta.json").write_text(json.dumps(meta))


def widen_run_config(work: Path) -> None:
    config = work / "run" / "config.toml"
    config.write_text(config.read_text().replace("d_model = 32", "d_model = 64"))


class OpensAFile:
    """A pickle payload: unpickling it would create the file `pwned`."""

    def __reduce__(self):
        return (open, ("pwned", "w"))


def pickled_code_in_trainer_state(work: Path) -> None:
    """trainer.pt replaced by a pickle with a code payload, its checksum updated to match."""
    from fixedfirst.runs.checkpoint import sha256

    ckpt = checkpoint_dir(work, "run", 8)
    torch.save({"optimizer": OpensAFile(), "data": {}}, ckpt / "trainer.pt")
    meta = json.loads((ckpt / "meta.json").read_text())
    meta["files"]["trainer.pt"] = sha256(ckpt / "trainer.pt")
    (ckpt / "meta.json").write_text(json.dumps(meta))


def break_run_config(work: Path) -> None:
    config = work / "run" / "config.toml"
    config.write_text(config.read_text().replace("[model]", "[model", 1))


def reprepare_data_with_bpe(work: Path) -> None:
    shutil.rmtree(work / "data")
    shutil.copytree(work / "data-bpe", work / "data")


def config_only_run(work: Path) -> None:
    (work / "fresh").mkdir()
    shutil.copy(work / "run" / "config.toml", work / "fresh" / "config.toml")
    shutil.rmtree(work / "run")


def empty_directory(work: Path) -> None:
    (work / "empty").mkdir()


def delete_weights(work: Path) -> None:
    (checkpoint_dir(work, "run", 8) / "model.safetensors").unlink()


# -- the cases ---------------------------------------------------------------------------------

TRAIN_NEW = ["train", "tiny.toml", "--out", "new-run"]


def bad_config(case_id: str, given: str, toml: str, fragment: str) -> Case:
    return Case(
        case_id,
        "config",
        f"{given}: `{toml.strip().replace(chr(10), '; ')}`",
        ["train", "bad.toml", "--out", "new-run"],
        fragment,
        files={"bad.toml": toml},
    )


CASES: list[Case] = [
    # Configuration files (more in tests/test_config.py, listed by config_cases below).
    bad_config("k0-negative", "negative K0", "[schedule]\nk0 = -1\n", "schedule.k0: must be >= 1"),
    bad_config(
        "switch-window-too-short",
        "an auto switch whose window holds too few logged losses to fit a trend",
        '[schedule]\nswitch = "auto"\n[switch]\nwindow = 0.01\n',
        "switch.window = 0.01 of 488 steps holds 0 logged losses, fewer than the 5",
    ),
    bad_config(
        "switch-floor-above-ceiling",
        "an auto switch whose floor is above its ceiling",
        '[schedule]\nswitch = "auto"\n[switch]\nfloor = 0.95\n',
        "switch.floor: 0.95 is above ceiling = 0.9",
    ),
    bad_config(
        "grad-depth-zero",
        "truncated backprop through 0 iterations",
        "[train]\ngrad_depth = 0\n",
        "train.grad_depth: must be >= 1",
    ),
    bad_config(
        "strategy-unknown",
        "an unknown multi-process strategy",
        '[train]\nstrategy = "zero3"\n',
        "train.strategy: 'zero3' is not one of 'ddp', 'fsdp'",
    ),
    bad_config(
        "mean-nan",
        "NaN as the mean depth",
        "[schedule]\nmean = nan\n",
        "schedule.mean: must be a finite number",
    ),
    bad_config(
        "flops-inf",
        "an infinite FLOP budget",
        "[train]\nflops = inf\n",
        "train.flops: must be a finite number",
    ),
    bad_config(
        "tokens-below-one-step",
        "a token budget smaller than one step",
        "[train]\ntokens = 100\n",
        "less than one step of batch_size * seq_len",
    ),
    bad_config(
        "flops-below-one-step",
        "a FLOP budget smaller than one step",
        "[train]\nflops = 1.0\n",
        "is below the cost of a single step",
    ),
    bad_config(
        "mean-below-one",
        "a mean depth below 1",
        "[schedule]\nmean = 0.5\n",
        "schedule.mean: must be 1 or strictly between 1 and k_max = 16",
    ),
    bad_config(
        "eval-depths-empty",
        "no evaluation depth",
        "[eval]\ndepths = []\n",
        "eval.depths: needs at least one depth",
    ),
    bad_config(
        "snapshot-zero",
        "a FLOP snapshot at 0% of the budget",
        "[train]\nsnapshots = [0.0]\n",
        "train.snapshots: fractions must be in (0, 1]",
    ),
    bad_config(
        "log-to-unknown",
        "an unknown place for the training curves",
        '[train]\nlog_to = ["mlflow"]\n',
        "train.log_to[0]: 'mlflow' is not one of 'tensorboard', 'wandb'",
    ),
    bad_config(
        "log-to-twice",
        "TensorBoard named twice",
        '[train]\nlog_to = ["tensorboard", "wandb", "tensorboard"]\n',
        "train.log_to: 'tensorboard' is listed twice",
    ),
    bad_config(
        "log-axis-unknown",
        "an unknown x-axis for the logged curves",
        '[train]\nlog_axis = "time"\n',
        "train.log_axis: 'time' is not one of 'step', 'tokens', 'flops'",
    ),
    bad_config(
        "odd-head-size",
        "an odd attention head size",
        "[model]\nd_model = 12\nn_heads = 4\n",
        "must be even (rotary)",
    ),
    bad_config(
        "section-not-table",
        "a section written as a value",
        "train = 5\n",
        "[train] must be a table of key = value lines",
    ),
    bad_config(
        "batch-zero",
        "an empty batch",
        "[train]\nbatch_size = 0\n",
        "train.batch_size: must be >= 1",
    ),
    bad_config(
        "lr-negative", "a negative learning rate", "[train]\nlr = -0.001\n", "train.lr: must be > 0"
    ),
    bad_config(
        "data-kind-unknown",
        "an unknown data kind",
        '[data]\nkind = "csv"\n',
        "data.kind = 'csv' is not a known data kind",
    ),
    bad_config(
        "data-task-option-flat",
        "a task's option written in [data] itself (the layout before [data.KIND])",
        '[data]\nkind = "bios"\npeople = 100\n',
        "unknown key data.people; valid keys in [data]: kind, path, seed; a data kind's own "
        "options go in its table [data.bios]",
    ),
    bad_config(
        "data-task-table-other-kind",
        "options of one kind while [data] names another",
        '[data]\nkind = "synthetic"\n\n[data.bios]\npeople = 100\n',
        "[data.bios] holds options of the data kind 'bios', but data.kind = 'synthetic'",
    ),
    bad_config(
        "data-task-option-unknown",
        "a misspelt task option",
        '[data]\nkind = "bios"\n\n[data.bios]\npeple = 100\n',
        "unknown key data.bios.peple; valid keys in [data.bios]:",
    ),
    bad_config(
        "data-task-option-range",
        "a task option out of range",
        '[data]\nkind = "bios"\n\n[data.bios]\npeople = 0\n',
        "data.bios.people: must be >= 1, got 0",
    ),
    bad_config(
        "data-options-on-plain-kind",
        "options for a kind that takes none",
        '[data]\nkind = "synthetic"\n\n[data.synthetic]\nbranching = 3\n',
        "[data.synthetic]: the data kind 'synthetic' takes no options",
    ),
    Case(
        "config-not-utf8",
        "config",
        "a config file that is not text (binary bytes)",
        ["train", "bad.toml", "--out", "new-run"],
        "not a UTF-8 text file",
        files={"bad.toml": b"\xff\xfe\x00binary"},
    ),
    # Command line.
    Case(
        "config-missing",
        "command line",
        "a config file that does not exist",
        ["train", "missing.toml", "--out", "new-run"],
        "config file 'missing.toml' does not exist",
    ),
    Case(
        "config-is-directory",
        "command line",
        "a directory given as the config file",
        ["train", "configs", "--out", "new-run"],
        "is a directory, not a TOML file",
        setup=lambda work: (work / "configs").mkdir(),
    ),
    Case(
        "set-wrong-type",
        "command line",
        "`--set` with a value of the wrong type",
        [*TRAIN_NEW, "--set", "train.batch_size=eight"],
        "train.batch_size: expected an integer, got 'eight'",
        needs=("tiny.toml",),
    ),
    Case(
        "nproc-zero",
        "command line",
        "`--nproc 0`",
        [*TRAIN_NEW, "--nproc", "0"],
        "--nproc must be >= 1, got 0",
        needs=("tiny.toml",),
    ),
    Case(
        "nproc-uneven",
        "command line",
        "`--nproc 3` with a global batch of 8",
        [*TRAIN_NEW, "--nproc", "3"],
        "train.batch_size = 8 must split into 3 rank(s)",
        needs=("tiny.toml",),
    ),
    Case(
        "stop-after-zero",
        "command line",
        "`--stop-after 0`",
        [*TRAIN_NEW, "--stop-after", "0"],
        "--stop-after must be >= 1, got 0",
        needs=("tiny.toml",),
    ),
    Case(
        "train-without-config",
        "command line",
        "`train` with neither a config nor `--resume`",
        ["train", "--out", "new-run"],
        "give a CONFIG.toml",
    ),
    Case(
        "resume-nonexistent",
        "command line",
        "`--resume` of a run directory that does not exist",
        ["train", "--out", "nowhere", "--resume"],
        "run directory nowhere does not exist",
    ),
    Case(
        "out-is-a-file",
        "command line",
        "`--out` naming an existing file",
        ["train", "tiny.toml", "--out", "tiny.toml"],
        "--out tiny.toml exists and is not a directory",
        needs=("tiny.toml",),
    ),
    Case(
        "device-cuda-without-gpu",
        "command line",
        "`train.device = cuda` on a machine without a GPU",
        [*TRAIN_NEW, "--set", "train.device=cuda"],
        "no CUDA device is here",
        needs=("tiny.toml",),
        skip="this machine has a GPU" if torch.cuda.is_available() else None,
    ),
    Case(
        "eval-nonexistent",
        "command line",
        "`eval` of a run directory that does not exist",
        ["eval", "nowhere"],
        "run directory nowhere does not exist",
    ),
    Case(
        "eval-no-checkpoint",
        "command line",
        "`eval` of a run without checkpoints",
        ["eval", "fresh"],
        "fresh has no complete checkpoint yet",
        needs=("run",),
        setup=config_only_run,
    ),
    Case(
        "eval-depth-zero",
        "command line",
        "`eval --depths 0`",
        ["eval", "run", "--depths", "0"],
        "depths must be >= 1, got 0",
        needs=("run",),
    ),
    Case(
        "eval-depth-range-backwards",
        "command line",
        "`eval --depths 8..2`",
        ["eval", "run", "--depths", "8..2"],
        "expected comma-separated depths or ranges",
        needs=("run",),
    ),
    Case(
        "eval-checkpoint-missing",
        "command line",
        "`eval --checkpoint 999` (no such step)",
        ["eval", "run", "--checkpoint", "999"],
        "no checkpoint at step 999",
        needs=("run",),
    ),
    Case(
        "eval-batches-zero",
        "command line",
        "`eval --batches 0`",
        ["eval", "run", "--batches", "0"],
        "--batches must be >= 1, got 0",
        needs=("run",),
    ),
    # Checkpoints.
    Case(
        "resume-all-corrupt",
        "checkpoint",
        "`--resume` when every checkpoint has a flipped byte",
        ["train", "--out", "run", "--resume", "--quiet"],
        "no loadable checkpoint in run/checkpoints: every one is corrupt",
        needs=("run",),
        setup=corrupt_every_checkpoint,
    ),
    Case(
        "resume-other-shape",
        "checkpoint",
        "`--resume` onto a checkpoint from a model of another shape",
        ["train", "--out", "run", "--resume", "--quiet"],
        "weights do not fit this model (",
        needs=("run", "wide-run"),
        setup=wide_checkpoint_into_run,
    ),
    Case(
        "eval-other-shape",
        "checkpoint",
        "`eval` after the run's config.toml was edited to another shape",
        ["eval", "run"],
        "weights do not fit this model (",
        needs=("run",),
        setup=widen_run_config,
    ),
    Case(
        "eval-flipped-byte",
        "checkpoint",
        "`eval --checkpoint 8` when that checkpoint's weights have a flipped byte",
        ["eval", "run", "--checkpoint", "8"],
        "model.safetensors is corrupt (checksum mismatch)",
        needs=("run",),
        setup=lambda work: flip_byte(checkpoint_dir(work, "run", 8) / "model.safetensors"),
    ),
    Case(
        "eval-all-corrupt",
        "checkpoint",
        "`eval` when every checkpoint has a flipped byte",
        ["eval", "run"],
        "every checkpoint in run/checkpoints is corrupt",
        needs=("run",),
        setup=corrupt_every_checkpoint,
    ),
    Case(
        "eval-weights-missing",
        "checkpoint",
        "`eval --checkpoint 8` when that checkpoint's weights file was deleted",
        ["eval", "run", "--checkpoint", "8"],
        "model.safetensors is missing",
        needs=("run",),
        setup=delete_weights,
    ),
    Case(
        "resume-pickled-code",
        "checkpoint",
        "`--resume` when trainer.pt holds a pickle with a code payload (checksum matching)",
        ["train", "--out", "run", "--resume", "--quiet"],
        "cannot load trainer.pt: it holds objects other than tensors",
        needs=("run",),
        setup=pickled_code_in_trainer_state,
    ),
    Case(
        "resume-broken-config",
        "checkpoint",
        "`--resume` when the run's config.toml has a syntax error",
        ["train", "--out", "run", "--resume", "--quiet"],
        "run/config.toml: TOML syntax error",
        needs=("run",),
        setup=break_run_config,
    ),
    # Data.
    Case(
        "data-path-missing",
        "data",
        "`data.path` that does not exist",
        ["train", "tokens.toml", "--out", "new-run", "--set", "data.path=nowhere"],
        "nowhere: no such data directory; make it with `fixedfirst prepare",
        needs=("tokens.toml",),
    ),
    Case(
        "data-path-unprepared",
        "data",
        "`data.path` naming a directory `fixedfirst prepare` did not write",
        ["train", "tokens.toml", "--out", "new-run", "--set", "data.path=empty"],
        "empty: not a prepared data directory (no meta.json)",
        needs=("tokens.toml",),
        setup=empty_directory,
    ),
    Case(
        "data-vocab-larger-than-model",
        "data",
        "a model vocabulary smaller than the data's (byte tokenizer: 257 ids)",
        ["train", "tokens.toml", "--out", "new-run", "--set", "model.vocab_size=48"],
        "model.vocab_size = 48 is smaller than the vocabulary of the data",
        needs=("tokens.toml", "data"),
    ),
    Case(
        "data-validation-too-small",
        "data",
        "more validation batches than the validation split holds",
        ["train", "tokens.toml", "--out", "new-run", "--set", "eval.batches=1000"],
        "lower eval.batches",
        needs=("tokens.toml", "data"),
    ),
    Case(
        "resume-other-tokenizer",
        "data",
        "`--resume` after the data directory was prepared again with another tokenizer",
        ["train", "--out", "tokens-run", "--resume", "--quiet"],
        "the checkpoint was trained on other data than data",
        needs=("tokens-run", "data", "data-bpe"),
        setup=reprepare_data_with_bpe,
    ),
    Case(
        "eval-other-tokenizer",
        "data",
        "`eval` after the data directory was prepared again with another tokenizer",
        ["eval", "tokens-run"],
        "the checkpoint was trained on other data than data",
        needs=("tokens-run", "data", "data-bpe"),
        setup=reprepare_data_with_bpe,
    ),
]

# A sweep of two runs on tokens.toml (whose data path is "data"); each case breaks one thing.
SWEEP_TOML = """base = "tokens.toml"

[sweep]
reference = "uniform"

[[runs]]
name = "uniform"
schedule.kind = "uniform"
schedule.k_max = 16

[[runs]]
name = "ff"
schedule.k0 = 2
"""
SWEEP = ["sweep", "sweep.toml", "--out", "out"]
CLAIM_TOML = """
[[claims]]
text = "K0=2 within 0.5% of uniform"
a = "ff"
b = "uniform"
measure = "relative"
claim = "below"
bound = 0.005
"""


def sweep_case(
    id: str, given: str, text: str, fragment: str, argv: list[str] = SWEEP, **kwargs
) -> Case:
    needs = kwargs.pop("needs", ("tokens.toml", "data"))
    return Case(id, "sweep", given, argv, fragment, needs, {"sweep.toml": text}, **kwargs)


def changed_run_in_sweep_dir(work: Path) -> None:
    """out/runs/uniform holds a run of another schedule (a fixed-first run paused at step 4)."""
    (work / "out" / "runs").mkdir(parents=True)
    shutil.copytree(work / "tokens-run", work / "out" / "runs" / "uniform")


SWEEP_CASES: list[Case] = [
    sweep_case(
        "sweep-unknown-key",
        "a sweep file with an unknown top-level key: `colour = 1`",
        "colour = 1\n" + SWEEP_TOML,
        "sweep.toml: unknown key 'colour'; valid: base, sweep, runs",
    ),
    sweep_case(
        "sweep-unknown-run-key",
        "a run that sets an unknown key: `schedule.kzero = 3`",
        SWEEP_TOML + "schedule.kzero = 3\n",
        'run "ff": unknown key schedule.kzero',
    ),
    sweep_case(
        "sweep-duplicate-names",
        "two runs with the same name",
        SWEEP_TOML + '[[runs]]\nname = "ff"\n',
        "two runs are named 'ff'",
    ),
    sweep_case(
        "sweep-no-base",
        "a sweep file without a base configuration",
        SWEEP_TOML.replace('base = "tokens.toml"\n', ""),
        "sweep.toml: no base configuration",
    ),
    sweep_case(
        "sweep-reference-not-uniform",
        "a reference run that does not train uniform 1..16",
        SWEEP_TOML.replace('reference = "uniform"', 'reference = "ff"'),
        "sweep.reference = 'ff' must train uniform 1..16",
    ),
    sweep_case(
        "sweep-flops-of-unknown",
        "`flops_of` naming no run above it",
        SWEEP_TOML + 'flops_of = "later"\n',
        "flops_of = 'later' must name a run listed above this one",
    ),
    sweep_case(
        "sweep-only-unknown",
        "`sweep --only` naming no run of the file",
        SWEEP_TOML,
        "--only: no run or entry named 'fff'",
        argv=[*SWEEP, "--only", "fff"],
    ),
    sweep_case(
        "sweep-rows-from-other-file",
        "`sweep --rows-from` a JSON file that is not a sweep's results.json",
        SWEEP_TOML,
        "--rows-from data/meta.json: not a sweep's results.json",
        argv=[*SWEEP, "--rows-from", "data/meta.json"],
    ),
    sweep_case(
        "sweep-data-missing",
        "a sweep whose data directory does not exist",
        SWEEP_TOML,
        'run "uniform": data: no such data directory',
        needs=("tokens.toml",),
    ),
    sweep_case(
        "sweep-changed-run",
        "a sweep directory holding a run of the same name with another configuration",
        SWEEP_TOML,
        "out/runs/uniform holds a run with a different configuration (schedule.k_max, ",
        needs=("tokens.toml", "data", "tokens-run"),
        setup=changed_run_in_sweep_dir,
    ),
    sweep_case(
        "sweep-jobs-zero",
        "`sweep --jobs 0` (no worker process to run anything)",
        SWEEP_TOML,
        "--jobs must be >= 1, got 0",
        argv=[*SWEEP, "--jobs", "0"],
    ),
    sweep_case(
        "sweep-claim-unknown-entry",
        "a `[[claims]]` table naming no [[runs]] entry",
        SWEEP_TOML.replace("[sweep]\n", "[sweep]\nseeds = [0, 1]\n")
        + CLAIM_TOML.replace('"ff"', '"ff-k3"'),
        "claims[0]: a = 'ff-k3' is not a [[runs]] entry; entries: uniform, ff",
    ),
    sweep_case(
        "sweep-claim-unknown-key",
        "a `[[claims]]` table with an unknown key: `lower_is_better = true`",
        SWEEP_TOML.replace("[sweep]\n", "[sweep]\nseeds = [0, 1]\n")
        + CLAIM_TOML
        + "lower_is_better = true\n",
        "claims[0]: unknown key claims.lower_is_better; valid keys in [claims]: a, b,",
    ),
    sweep_case(
        "sweep-claim-without-seeds",
        "`[[claims]]` in a sweep without `[sweep] seeds`",
        SWEEP_TOML + CLAIM_TOML,
        "[[claims]] are decided by intervals over seeds; set [sweep] seeds",
    ),
    Case(
        "figure3-not-fixed-first",
        "sweep",
        "`figure3` of a run that is not fixed-first",
        ["figure3", "run", "--out", "f.png"],
        "Figure 3 needs a fixed-first run",
        needs=("run",),
        setup=lambda work: (work / "run" / "config.toml").write_text(
            (work / "run" / "config.toml").read_text().replace("fixed-first", "uniform")
        ),
    ),
]


# The other commands: bios, generate, export, figure3, diagnose, downstream.


def smoke_preset_with(line: str) -> str:
    """The shipped smoke preset with `key = value` set in its [experiment] section."""
    smoke = (resources.files("fixedfirst.studies.bios") / "presets" / "smoke.toml").read_text()
    head, rest = smoke.split("[experiment]\n", 1)
    section, tail = rest.split("\n[", 1)
    key = line.split("=")[0].strip()
    kept = [x for x in section.splitlines() if x.split("=")[0].strip() != key]
    return head + "\n".join(["[experiment]", line, *kept]) + "\n\n[" + tail


def bios_preset_case(id: str, given: str, line: str, fragment: str) -> Case:
    return Case(
        id,
        "bios",
        f"{given}: `{line}`",
        ["bios", "--preset", "preset.toml", "--out", "fig1"],
        fragment,
        files={"preset.toml": smoke_preset_with(line)},
    )


def delete_metrics(work: Path) -> None:
    (work / "run" / "metrics.jsonl").unlink()


def tear_last_metrics_line(work: Path) -> None:
    """What a process killed while appending to metrics.jsonl leaves: half a JSON line."""
    with open(work / "run" / "metrics.jsonl", "a") as f:
        f.write('{"kind": "train", "step": 9, "lo')


def tensorboard_in_run_config(work: Path) -> None:
    """The run was trained with its curves in TensorBoard on the step axis."""
    config = work / "run" / "config.toml"
    config.write_text(config.read_text().replace("log_to = []", 'log_to = ["tensorboard"]'))


def earlier_export(work: Path) -> None:
    (work / "exported").mkdir()
    (work / "exported" / "config.json").write_text('{"format": "fixedfirst-export"}\n')
    (work / "exported" / "model.safetensors").write_bytes(b"weights of another run")


GENERATE = ["generate", "tokens-run", "--prompt", "river stone"]

COMMAND_CASES: list[Case] = [
    Case(
        "bios-preset-unknown",
        "bios",
        "`bios --preset smok` (a misspelt preset name)",
        ["bios", "--preset", "smok", "--out", "fig1"],
        "--preset 'smok': unknown preset; choose one of default, smoke",
    ),
    bios_preset_case(
        "bios-preset-unknown-key",
        "a preset file with a misspelt key in [experiment]",
        "recal_people = 8",
        "unknown key experiment.recal_people",
    ),
    bios_preset_case(
        "bios-recall-people-zero",
        "a preset file that scores recall on nobody",
        "recall_people = 0",
        "experiment.recall_people: must be >= 1, got 0",
    ),
    bios_preset_case(
        "bios-snapshot-at-end",
        "a preset file with a snapshot at 100% of the budget",
        "snapshots = [0.45, 1.0]",
        "experiment.snapshots: fractions must be in (0, 1)",
    ),
    Case(
        "bios-vocab-too-small",
        "bios",
        "`bios --preset smoke --set model.vocab_size=100` (below the bios vocabulary)",
        ["bios", "--preset", "smoke", "--out", "fig1", "--set", "model.vocab_size=100"],
        "model.vocab_size = 100 is below the 216 tokens of the bios vocabulary",
    ),
    Case(
        "bios-budget-below-uniform-step",
        "bios",
        "a FLOP budget that pays for one step of fixed K=4 but not of uniform 1..16",
        ["bios", "--preset", "smoke", "--out", "fig1", "--set", "experiment.flops=3e9"],
        'run "uniform-1-16-seed0": train.flops = 3e+09 is below the cost of a single step',
    ),
    Case(
        "bios-jobs-zero",
        "bios",
        "`bios --jobs 0` (no worker process to run anything)",
        ["bios", "--preset", "smoke", "--out", "fig1", "--jobs", "0"],
        "--jobs must be >= 1, got 0",
    ),
    Case(
        "generate-nonexistent",
        "generate",
        "`generate` from a run directory that does not exist",
        ["generate", "nowhere", "--prompt", "river stone"],
        "run directory nowhere does not exist",
    ),
    Case(
        "generate-depth-zero",
        "generate",
        "`generate --depth 0`",
        [*GENERATE, "--depth", "0"],
        "depth must be an integer >= 1, got 0",
        needs=("tokens-run", "data"),
    ),
    Case(
        "generate-threshold-negative",
        "generate",
        "`generate --exit kl --threshold -0.001`",
        [*GENERATE, "--exit", "kl", "--threshold", "-0.001"],
        "the KL threshold must be a finite number >= 0, got -0.001",
        needs=("tokens-run", "data"),
    ),
    Case(
        "generate-depth-and-exit",
        "generate",
        "`generate --depth 4 --exit kl` (a fixed depth and an adaptive one)",
        [*GENERATE, "--depth", "4", "--exit", "kl"],
        "give either --depth K (fixed depth) or --exit RULE, not both",
        needs=("tokens-run", "data"),
    ),
    Case(
        "generate-exit-unknown",
        "generate",
        "`generate --exit latent` (an exit rule that does not exist)",
        [*GENERATE, "--exit", "latent"],
        "--exit 'latent': unknown exit rule; choose one of kl, entropy, state, argmax",
        needs=("tokens-run", "data"),
    ),
    Case(
        "generate-exit-argmax-fraction",
        "generate",
        "`generate --exit argmax --threshold 2.5` (argmax counts iterations)",
        [*GENERATE, "--exit", "argmax", "--threshold", "2.5"],
        "the argmax threshold (iterations the argmax must hold) must be an integer >= 2, got 2.5",
        needs=("tokens-run", "data"),
    ),
    Case(
        "generate-speculate-too-deep",
        "generate",
        "`generate --depth 4 --speculate 4` (a draft as deep as the serving depth)",
        [*GENERATE, "--depth", "4", "--speculate", "4"],
        "--speculate 4:4: the draft depth must be below the serving depth, got draft depth 4 "
        "and serving depth 4",
        needs=("tokens-run", "data"),
    ),
    Case(
        "generate-speculate-default-depth",
        "generate",
        "`generate --speculate 16` on a run whose deepest training depth (the default) is 6",
        [*GENERATE, "--speculate", "16"],
        "the draft depth must be below the serving depth, got draft depth 16 and serving depth 6",
        needs=("tokens-run", "data"),
    ),
    Case(
        "generate-speculate-no-tokens",
        "generate",
        "`generate --speculate 2:0` (no draft tokens)",
        [*GENERATE, "--speculate", "2:0"],
        "--speculate 2:0: the number of draft tokens must be an integer >= 1, got 0",
        needs=("tokens-run", "data"),
    ),
    Case(
        "generate-speculate-malformed",
        "generate",
        "`generate --speculate 2:4:1`",
        [*GENERATE, "--speculate", "2:4:1"],
        "--speculate '2:4:1': expected DRAFT_DEPTH[:N_TOKENS], e.g. 2 or 2:8",
        needs=("tokens-run", "data"),
    ),
    Case(
        "generate-speculate-sampling",
        "generate",
        "`generate --speculate 2 --temperature 0.7` (speculation is greedy)",
        [*GENERATE, "--speculate", "2", "--temperature", "0.7"],
        "--speculate decodes greedily; it takes --temperature 0, got 0.7",
        needs=("tokens-run", "data"),
    ),
    Case(
        "generate-cache-zero-slots",
        "generate",
        "`generate --cache bounded:0` (a bounded cache of no slots)",
        [*GENERATE, "--cache", "bounded:0"],
        "--cache bounded:0: a bounded cache keeps S >= 1 slots per core layer, got S = 0",
        needs=("tokens-run", "data"),
    ),
    Case(
        "generate-cache-unknown",
        "generate",
        "`generate --cache compress` (a cache strategy that does not exist)",
        [*GENERATE, "--cache", "compress"],
        "--cache 'compress': unknown cache strategy; choose one of full, bounded:S, last",
        needs=("tokens-run", "data"),
    ),
    Case(
        "generate-speculate-bounded-cache",
        "generate",
        "`generate --depth 6 --speculate 2 --cache last` (speculation over a shared slot)",
        [*GENERATE, "--depth", "6", "--speculate", "2", "--cache", "last"],
        "--speculate 2:4: depth-speculative decoding needs every iteration's cache entry up to "
        "the serving depth 6, which the last-iteration cache does not keep",
        needs=("tokens-run", "data"),
    ),
    Case(
        "generate-prompt-not-utf8",
        "generate",
        "a prompt with a byte that is not UTF-8 (`--prompt $'caf\\xff'` in bash)",
        ["generate", "tokens-run", "--prompt", "caf\udcff"],
        "--prompt is not valid UTF-8: character 4 is the byte 0xff",
        needs=("tokens-run", "data"),
    ),
    Case(
        "export-nonexistent",
        "export",
        "`export` of a run directory that does not exist",
        ["export", "nowhere", "--out", "exported"],
        "run directory nowhere does not exist",
    ),
    Case(
        "export-out-not-empty",
        "export",
        "`export --out` naming a directory that holds an earlier export",
        ["export", "tokens-run", "--out", "exported"],
        "--out exported: directory exists and is not empty; nothing was written",
        needs=("tokens-run", "data"),
        setup=earlier_export,
    ),
    Case(
        "resume-log-axis-changed",
        "train",
        "`--resume --set train.log_axis=flops` of a run whose TensorBoard curves are on steps",
        ["train", "--resume", "--out", "run", "--set", "train.log_axis=flops"],
        "the run's tensorboard curves are on the 'step' axis and a resume continues them",
        needs=("run",),
        setup=tensorboard_in_run_config,
    ),
    Case(
        "export-hf-no-tokenizer",
        "export",
        "`export --format hf` of a run on synthetic data (no text, so no tokenizer)",
        ["export", "run", "--out", "hf-export", "--format", "hf"],
        "--format hf needs a tokenizer, and this run trained on [data] kind = 'synthetic'",
        needs=("run",),
    ),
    Case(
        "export-cache-fixedfirst-format",
        "export",
        "`export --cache last` in fixedfirst's format (which serves every strategy)",
        ["export", "tokens-run", "--out", "exported", "--cache", "last"],
        "--cache last: an export in fixedfirst's format serves every cache strategy; choose "
        "one when serving it",
        needs=("tokens-run", "data"),
    ),
    Case(
        "export-hf-cache-zero-slots",
        "export",
        "`export --format hf --cache bounded:0`",
        ["export", "tokens-run", "--out", "exported", "--format", "hf", "--cache", "bounded:0"],
        "--cache bounded:0: a bounded cache keeps S >= 1 slots per core layer, got S = 0",
        needs=("tokens-run", "data"),
    ),
    Case(
        "figure3-nonexistent",
        "figure3",
        "`figure3` of a run directory that does not exist",
        ["figure3", "nowhere"],
        "run directory nowhere does not exist",
    ),
    Case(
        "figure3-no-metrics",
        "figure3",
        "`figure3` of a fixed-first run whose metrics.jsonl was deleted",
        ["figure3", "run", "--out", "f.png"],
        "run has no metrics.jsonl yet",
        needs=("run",),
        setup=delete_metrics,
    ),
    Case(
        "figure3-torn-metrics",
        "figure3",
        "`figure3` when metrics.jsonl ends in half a line (the process was killed mid-write)",
        ["figure3", "run", "--out", "f.png"],
        "line 9 is not a JSON metrics record (the file is damaged)",
        needs=("run",),
        setup=tear_last_metrics_line,
    ),
    Case(
        "diagnose-uniform-run",
        "diagnose",
        "`diagnose` of a run trained with a uniform schedule (no switch checkpoint)",
        ["diagnose", "uniform-run"],
        "which has no switch point, so it has no 'switch' checkpoint",
        needs=("uniform-run",),
    ),
    Case(
        "diagnose-before-switch",
        "diagnose",
        "`diagnose` of a fixed-first run paused before its switch step",
        ["diagnose", "run"],
        "run has no checkpoint tagged 'switch' yet",
        needs=("run",),
    ),
    Case(
        "diagnose-updates-beyond-run",
        "diagnose",
        "`diagnose --checkpoint 8 --updates 0,40` on a run of 48 steps",
        ["diagnose", "run", "--checkpoint", "8", "--updates", "0,40"],
        "--updates 40 is beyond the run: the run has 48 steps, 40 after step 8",
        needs=("run",),
    ),
    Case(
        "diagnose-batches-one",
        "diagnose",
        "`diagnose --batches 1`",
        ["diagnose", "run", "--checkpoint", "8", "--batches", "1"],
        "--batches must be >= 2 (an interval needs 2), got 1",
        needs=("run",),
    ),
    Case(
        "downstream-nonexistent",
        "downstream",
        "`downstream` of a run directory that does not exist",
        ["downstream", "nowhere", "--tasks", "piqa"],
        "nowhere: no such run or export directory",
    ),
]


def config_cases() -> list[Case]:
    """The configuration cases of tests/test_config.py, run the same way for the table."""
    from tests.test_config import BAD_CONFIGS

    return [
        Case(
            f"test_config-{i}",
            "config",
            f"`{text.strip().replace(chr(10), '; ')}` (tests/test_config.py)",
            ["compute", "bad.toml"],
            fragment,
            files={"bad.toml": text},
        )
        for i, (text, fragment) in enumerate(BAD_CONFIGS)
    ]


def all_cases() -> list[Case]:
    from tests.bad_input_checkpoint import CHECKPOINT_CASES
    from tests.bad_input_cluster import CLUSTER_CASES
    from tests.bad_input_corpus import CORPUS_CASES
    from tests.bad_input_edges import EDGE_CASES
    from tests.bad_input_foreign import FOREIGN_CASES
    from tests.bad_input_frontier import FRONTIER_CASES
    from tests.bad_input_inspect import INSPECT_CASES
    from tests.bad_input_memory import MEMORY_CASES
    from tests.bad_input_moe import MOE_CASES
    from tests.bad_input_newcomer import NEWCOMER_CASES
    from tests.bad_input_runs import RUN_CASES

    return (
        CASES
        + SWEEP_CASES
        + COMMAND_CASES
        + config_cases()
        + EDGE_CASES
        + INSPECT_CASES
        + CLUSTER_CASES
        + MEMORY_CASES
        + NEWCOMER_CASES
        + CORPUS_CASES
        + RUN_CASES
        + FRONTIER_CASES
        + FOREIGN_CASES
        + MOE_CASES
        + CHECKPOINT_CASES
    )


# -- prebuilt things and running a case ----------------------------------------------------------


@contextlib.contextmanager
def inside(directory: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(before)


def build_assets(root: Path) -> None:
    """Everything a case may need, built once: a tiny config and a run of it paused at step 8
    (checkpoints at 4 and 8), a run of another width, a run of it with a uniform schedule, byte
    and BPE token data from the same text, a run on the byte data, and a tiny looped checkpoint
    with text in its tokens and a run from it (tests/bad_input_checkpoint.py)."""
    from fixedfirst.config import load_config
    from fixedfirst.data.prepare import PrepareOptions, prepare
    from fixedfirst.train.trainer import Trainer
    from tests.bad_input_checkpoint import build_checkpoint_assets

    root.mkdir(parents=True, exist_ok=True)
    (root / "tiny.toml").write_text(TINY_TOML)
    (root / "tokens.toml").write_text(TOKENS_TOML)
    rng = np.random.default_rng(0)
    words = ["river", "stone", "lamp", "orbit", "cedar", "quartz", "violet", "harbor"]
    documents = [" ".join(rng.choice(words, size=rng.integers(8, 30))) for _ in range(300)]
    corpus = root / "corpus.txt"
    corpus.write_text("\n%\n".join(documents) + "\n")
    with inside(root):
        Trainer(load_config("tiny.toml"), "run", quiet=True).train(stop_after=8)
        wide = load_config("tiny.toml", ["model.d_model=64"])
        Trainer(wide, "wide-run", quiet=True).train(stop_after=4)
        uniform = load_config("tiny.toml", ["schedule.kind=uniform"])
        Trainer(uniform, "uniform-run", quiet=True).train(stop_after=4)
        prepare([str(corpus)], "data", PrepareOptions(separator="%", val_fraction=0.2))
        bpe = PrepareOptions(tokenizer="bpe", vocab_size=300, separator="%", val_fraction=0.2)
        prepare([str(corpus)], "data-bpe", bpe)
        Trainer(load_config("tokens.toml"), "tokens-run", quiet=True).train(stop_after=4)
        build_checkpoint_assets(root)
        build_inkling_assets(root)


def build_inkling_assets(root: Path) -> None:
    """A transformers Inkling2Loop run on the byte data (two steps), `inkling-run`, and
    `noloop-export`: an export of the same model with no layer in its loop (it runs depth 1
    only; fixedfirst cannot train one, since it measures a run's compute at depths 1..3), its
    weights those of a new model."""
    from fixedfirst.config import load_config
    from fixedfirst.config.run import model_section
    from fixedfirst.export.writer import export_run
    from fixedfirst.model.kinds import build_model
    from fixedfirst.runs.checkpoint import save_weights, tied_aliases
    from fixedfirst.train.trainer import Trainer
    from tests.inkling_helpers import HAS_INKLING, inkling_text_toml

    if not HAS_INKLING:
        return
    (root / "inkling.toml").write_text(inkling_text_toml(str(root / "data")))
    config = load_config(root / "inkling.toml")
    Trainer(config, root / "inkling-run", quiet=True).train(stop_after=2)
    export = root / "noloop-export"
    export_run(root / "inkling-run", export)
    described = json.loads((export / "config.json").read_text())
    described["model"]["transformers"]["loop_layer_index_end"] = 1
    del described["source"]["weights_sha256"]
    model = build_model(model_section(described["model"]))
    aliases = tied_aliases(model)
    weights = {k: v for k, v in model.state_dict().items() if k not in aliases}
    save_weights(weights, export / "model.safetensors")
    (export / "config.json").write_text(json.dumps(described, indent=2) + "\n")


def prepare_work(case: Case, assets: Path, work: Path) -> None:
    work.mkdir(parents=True, exist_ok=True)
    for name in case.needs:
        source = assets / name
        if source.is_dir():
            shutil.copytree(source, work / name)
            config = work / name / "config.toml"
            if config.is_file():  # a run stores data.path absolute: point it at the copies
                config.write_text(config.read_text().replace(str(assets), str(work)))
        else:
            shutil.copy(source, work / name)
    for name, content in case.files.items():
        path = work / name
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    if case.setup is not None:
        case.setup(work)


def snapshot(directory: Path) -> dict[str, bytes | None]:
    """Every file's bytes and every directory (None) under `directory`."""
    return {
        str(p.relative_to(directory)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(directory.rglob("*"))
    }


@dataclass
class Outcome:
    code: int | str | None
    stdout: str
    stderr: str


def _refuse_launch(*args, **kwargs):
    raise AssertionError("a bad-input case tried to start training processes (--nproc)")


def _refuse_network(*args, **kwargs):
    raise AssertionError("a bad-input case tried to open a network connection")


def run_case(case: Case, work: Path) -> Outcome:
    """Run the case's command line in process inside `work`."""
    from fixedfirst.cli.main import main
    from fixedfirst.train import launcher

    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    launch_before, connect_before = launcher.launch, socket.create_connection
    launcher.launch = _refuse_launch
    socket.create_connection = _refuse_network  # a refusal must come before any network probe
    from tests.bad_input_edges import read_only, release_lock_holders

    try:
        with (
            inside(work),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            read_only([work / p for p in case.read_only]),
            case.stand_in() if case.stand_in is not None else contextlib.nullcontext(),
        ):
            main(case.argv)
    except SystemExit as e:
        code = e.code
    finally:
        launcher.launch, socket.create_connection = launch_before, connect_before
        release_lock_holders()
    return Outcome(code, out.getvalue(), err.getvalue())


# -- the table -----------------------------------------------------------------------------------


def table_header(cases: int) -> str:
    """The page's introduction, which says how many cases (rows) it has."""
    return TABLE_HEADER.format(cases=cases)


TABLE_HEADER = """\
# Bad input: what the user gets

{cases} cases, one row each. Every row is a test (`tests/test_bad_input.py`): the command runs
in process on a fresh copy of what it needs; it must exit with status 2, print exactly one line
on stderr (no traceback) and leave every file that was already on disk unchanged. The table and
this count are generated from the same case list by `python scripts/update_bad_input_table.py`,
and the test fails when a row here differs from what the command prints now. Paths are relative
to the directory the command ran in.

Read-only places: the tests run as root, whom permission bits do not stop, so an audit hook
refuses every write below a read-only path with the kernel's EACCES (tests/bad_input_edges.py).
A run another process is writing is held by a helper process that writes PID 4242 into the lock.

Not in the table: most of `fixedfirst prepare`'s own bad inputs (tests/test_data_prepare.py),
the `--set` syntax cases of tests/test_config.py, faults during a run (a full disk while writing
a checkpoint, an export or prepared data, a flipped byte followed by `--resume`:
tests/test_faults.py; a killed process, SIGTERM and SIGUSR1: tests/test_crash.py,
tests/test_hard_edges.py and tests/test_distributed.py).

| # | area | the user gives | what they get (stderr, exit status 2) |
| --- | --- | --- | --- |
"""


def table_row(number: int, case: Case, message: str) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    return f"| {number} | {case.area} | {cell(case.given)} | `` {cell(message)} `` |"
