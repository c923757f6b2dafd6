"""The contributor's recipes of docs/development/extending.md work as written: a task and an
exit rule added in a package of their own (a temporary one on sys.path, outside fixedfirst) run
through the public API, as does a toy study on the study kit (tests/fixtures/toy_study.py). A
recipe that needs an edit the docs do not mention fails here."""

from __future__ import annotations

import importlib
import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from fixedfirst.cli.main import main
from fixedfirst.data.registry import KINDS, DataKind, data_kind, register_kind
from fixedfirst.errors import UserError
from fixedfirst.model import LoopedTransformer
from fixedfirst.serve import Adaptive, teacher_forced_exit
from tests.conftest import tiny_model_config
from tests.trainer_helpers import TINY_TOML

COUNTING_TASK = '''
"""A toy task: sequences count up modulo `period`; its metric is next-token accuracy."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from fixedfirst.config import RunConfig
from fixedfirst.config.schema import require
from fixedfirst.data import Batch, BatchSource, DataKind, register_kind
from fixedfirst.data.registry import TaskReport, kind_options
from fixedfirst.data.source import rank_rows


@dataclass
class CountingOptions:
    SECTION: ClassVar[str] = "data.counting"

    period: int = 5
    """Tokens count 0, 1, ..., period - 1, 0, 1, ..."""

    def __post_init__(self) -> None:
        require(self.period >= 2, "data.counting.period", f"must be >= 2, got {self.period}")


class CountingSource(BatchSource):
    served = 0
    """Training batches handed out by any instance (what the test reads)."""

    def __init__(self, period: int, seq_len: int) -> None:
        self.vocab_size, self.period, self.seq_len, self.position = period, period, seq_len, 0

    def rows(self, starts) -> Batch:
        data = (torch.tensor(list(starts))[:, None] + torch.arange(self.seq_len + 1)) % self.period
        return Batch(data[:, :-1].contiguous(), data[:, 1:].contiguous())

    def next_batch(self, global_batch: int, rank: int = 0, world_size: int = 1) -> Batch:
        batch = self.rows(self.position + r for r in rank_rows(global_batch, rank, world_size))
        self.position += global_batch
        CountingSource.served += 1
        return batch

    def validation_batches(self, n_batches, batch_size, seed=None) -> list[Batch]:
        return [self.rows(range(i * batch_size, (i + 1) * batch_size)) for i in range(n_batches)]

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = int(state["position"])


def build(config: RunConfig) -> CountingSource:
    return CountingSource(kind_options(config).period, config.train.seq_len)


def evaluate(model, config: RunConfig, depths: list[int], limit: int | None) -> TaskReport:
    batch = build(config).validation_batches(1, limit or 4)[0]
    accuracy = {
        depth: float((logits.argmax(-1) == batch.targets).float().mean())
        for depth, logits in model.logits_by_depth(batch.inputs, depths)
    }
    return TaskReport(
        headline=f"next-count accuracy ({len(batch.inputs)} sequences)",
        table="\\n".join(f"| {d} | {a:.3f} |" for d, a in accuracy.items()),
        record={"accuracy": {str(d): a for d, a in accuracy.items()}},
        score_name="next-count accuracy",
        scores=accuracy,
    )


KIND = register_kind(
    DataKind(
        name="counting",
        summary="count up modulo a period",
        build=build,
        options=CountingOptions,
        evaluate=evaluate,
    )
)
'''

STOP_AT_RULE = '''
"""A toy exit rule: every row stops after exactly `threshold` iterations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from fixedfirst.serve.exit_rules import ExitRule, ExitTracker


class Counter(ExitTracker):
    def __init__(self, batch: int, stop_at: int, device) -> None:
        self.done = torch.zeros(batch, dtype=torch.long, device=device)
        self.stop_at = stop_at

    def update(self, rows, state, logprobs):
        self.done[rows] += 1
        return self.done[rows] >= self.stop_at


@dataclass(frozen=True)
class StopAt(ExitRule):
    threshold: float = 2
    name: ClassVar[str] = "stop-at"
    label: ClassVar[str] = "stop-at"
    reads_out: ClassVar[bool] = False

    def tracker(self, initial_state, vocab):
        return Counter(initial_state.shape[0], int(self.threshold), initial_state.device)
'''


@pytest.fixture
def own_package(tmp_path, monkeypatch):
    """Writes a module into a temporary directory on sys.path and imports it; afterwards the
    module, and any data kind it registered, are gone again."""
    registered = dict(KINDS)
    monkeypatch.syspath_prepend(str(tmp_path / "packages"))
    imported: list[str] = []

    def write_and_import(name: str, source: str):
        package = tmp_path / "packages" / name
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(textwrap.dedent(source))
        imported.append(name)
        return importlib.import_module(name)

    yield write_and_import
    for name in imported:
        sys.modules.pop(name, None)
    KINDS.clear()
    KINDS.update(registered)


def run_cli(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err


def test_a_task_in_its_own_package_trains_and_is_scored_by_its_metric(
    own_package, tmp_path, capsys
):
    counting = own_package("toy_counting", COUNTING_TASK)
    assert data_kind("counting") is counting.KIND

    config = tmp_path / "counting.toml"
    config.write_text(TINY_TOML + '\n[data]\nkind = "counting"\n\n[data.counting]\nperiod = 1\n')
    code, _, err = run_cli(capsys, "train", config, "--out", tmp_path / "bad", "--quiet")
    assert (code, err.strip()) == (
        2,
        "fixedfirst train: error: data.counting.period: must be >= 2, got 1",
    )
    assert not (tmp_path / "bad").exists()

    config.write_text(config.read_text().replace("period = 1", "period = 5"))
    run = tmp_path / "run"
    code, _, err = run_cli(
        capsys, "train", config, "--out", run, "--quiet", "--set", "train.tokens=1280"
    )
    assert code == 0, err
    assert counting.CountingSource.served > 0  # the run trained on the package's source

    code, out, err = run_cli(capsys, "eval", run, "--task", "counting", "--depths", "1,2")
    assert code == 0, err
    assert "next-count accuracy (4 sequences)" in out
    (written,) = run.glob("eval-counting-step-*.json")
    accuracy = json.loads(written.read_text())["accuracy"]
    assert set(accuracy) == {"1", "2"}
    assert all(0.0 <= a <= 1.0 for a in accuracy.values())


def test_a_second_kind_under_a_taken_name_is_refused(own_package):
    counting = own_package("toy_counting", COUNTING_TASK)
    assert register_kind(counting.KIND) is counting.KIND  # the same kind again: nothing changes
    impostor = DataKind(name="counting", summary="another", build=counting.build)
    with pytest.raises(ValueError, match="already registered as 'counting'"):
        register_kind(impostor)
    assert data_kind("counting") is counting.KIND


def test_unregistered_kinds_are_named_with_the_registered_ones():
    with pytest.raises(UserError, match="choose one of synthetic, tokens, bios, chains"):
        data_kind("counting")


def test_an_exit_rule_in_its_own_package_decides_each_tokens_depth(own_package):
    rule = own_package("toy_stop_at", STOP_AT_RULE).StopAt(threshold=3, max_depth=6)
    torch.manual_seed(0)
    model = LoopedTransformer(tiny_model_config()).double().eval()
    tokens = torch.randint(0, model.config.vocab_size, (2, 7))
    logits, depths = teacher_forced_exit(model, tokens, Adaptive(rule))
    assert depths.tolist() == [[3] * 7] * 2
    with torch.no_grad():
        fixed = model(tokens, depth=3)  # every position stopping at 3 is a depth-3 forward
    torch.testing.assert_close(logits, fixed)
    assert rule.describe() == "stop-at exit (threshold 3, max depth 6)"


SCHEDULE_RECIPE = [
    (
        "config/sections.py",
        'kind: Literal["fixed", ',
        'kind: Literal["two-step", "fixed", ',
    ),
    (
        "schedules.py",
        '        elif c.kind == "progressive":\n',
        '        elif c.kind == "two-step":\n'
        "            half = total_steps // 2\n"
        "            stages = [\n"
        '                Stage(0, half, Fixed(c.k_min), "low"),\n'
        '                Stage(half, total_steps, Fixed(c.k_max), "high"),\n'
        "            ]\n"
        '        elif c.kind == "progressive":\n',
    ),
    (
        "schedules.py",
        "    c = config\n",
        "    c = config\n"
        '    if c.kind == "two-step":\n'
        '        return f"two-step {c.k_min}, {c.k_max}"\n',
    ),
]
"""docs/development/extending.md's steps for a schedule kind, applied to a copy of the package:
the kind in ScheduleConfig, its stages in `Schedule._build_stages`, its name in `describe`."""


def test_a_schedule_added_as_the_docs_say_trains(tmp_path):
    """A schedule kind is part of the validated configuration, so it is added in the package
    itself: here in a copy, to check that the documented edits are all it takes."""
    import shutil
    import subprocess

    copy = tmp_path / "packages" / "fixedfirst"
    source = Path(importlib.import_module("fixedfirst").__file__).parent
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for name, anchor, replacement in SCHEDULE_RECIPE:
        text = (copy / name).read_text()
        assert text.count(anchor) == 1, (name, anchor)
        (copy / name).write_text(text.replace(anchor, replacement))
    config = tmp_path / "two-step.toml"
    fixed_first = 'kind = "fixed-first"\nk0 = 2\nswitch = 0.5\n'
    assert TINY_TOML.count(fixed_first) == 1
    # k0 and switch are fixed-first's: a file setting them for two-step is refused
    config.write_text(TINY_TOML.replace(fixed_first, 'kind = "two-step"\n'))
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "packages"), "OMP_NUM_THREADS": "1"}
    check = (
        "import sys, fixedfirst\n"
        f"assert fixedfirst.__file__.startswith({str(copy)!r}), fixedfirst.__file__\n"
        "from fixedfirst.cli.main import main\n"
        "main(sys.argv[1:])\n"
    )
    args = [sys.executable, "-c", check, "train", str(config), "--out", str(run), "--quiet"]
    done = subprocess.run(
        [*args, "--set", "train.tokens=1280"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r.get("kind") == "train"]
    assert [(r["depth"], r["phase"]) for r in steps] == [(1, "low")] * 5 + [(6, "high")] * 5
    assert json.loads((run / "summary.json").read_text())["schedule"] == "two-step 1, 6"


TOY_STUDY = Path(__file__).parent / "fixtures" / "toy_study.py"
"""docs/development/extending.md's recipe for a study, followed: a toy one on the study kit."""
TOY_PRESET = """
[experiment]
flops = 2e8

[[experiment.primary]]
name = "Uniform serves deeper"
a = "uniform-1-4"
b = "fixed-2"
depth = 4
""" + TINY_TOML.replace('[schedule]\nkind = "fixed-first"\nk0 = 2\nswitch = 0.5\nk_max = 6\n', "")


def test_a_study_on_the_kit_alone_trains_reports_and_reuses(tmp_path):
    """A study in at most 150 lines that imports, of the studies, only the kit runs through
    `conduct`: every run trained, its evaluation made, results.json, report.json and report.md
    (remade from report.json alone) written; invoked again it reuses every run."""
    import ast

    from fixedfirst.studies.kit.conduct import conduct
    from tests.fixtures.toy_study import ToyStudy, report_markdown

    source = TOY_STUDY.read_text()
    assert len(source.splitlines()) <= 150
    imported = {n.module for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom)}
    studies = {m for m in imported if m and m.startswith("fixedfirst.studies")}
    assert studies and all(m.startswith("fixedfirst.studies.kit.") for m in studies)
    preset = tmp_path / "toy.toml"
    preset.write_text(TOY_PRESET)
    out = tmp_path / "toy"
    done = conduct(ToyStudy.load(str(preset)), out, quiet=True, jobs=1)
    runs = ["fixed-2-seed0", "fixed-2-seed1", "uniform-1-4-seed0", "uniform-1-4-seed1"]
    assert (done.trained, done.reused) == (runs, [])
    assert done.files == [out / "results.json", out / "report.json", out / "report.md"]
    report = (out / "report.md").read_text()
    assert report == report_markdown(json.loads((out / "report.json").read_text()))
    sentence = next(line for line in report.splitlines() if "Uniform serves deeper" in line)
    assert sentence.endswith(("below zero: lower.", "below zero: higher.", ": cannot tell."))
    assert all(f"| {run} |" in report for run in runs)
    again = conduct(ToyStudy.load(str(preset)), out, quiet=True, jobs=1)
    assert (again.trained, again.reused) == ([], runs)
    preset.write_text(TOY_PRESET.replace("depth = 4", "depth = 3"))
    with pytest.raises(UserError, match=r"experiment.primary\[0\]: primary.depth: 3 "):
        ToyStudy.load(str(preset))
