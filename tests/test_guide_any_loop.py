"""docs/guides/any-loop.md runs as written: its Python blocks, executed in order in one namespace
(a fresh directory, a tiny Inkling2Loop model), train under fixed-first in the plain loop and
through the Hugging Face Trainer, and the Huginn-style model of the page's own (its depth a
forward argument, drawn at random when not given) in a plain loop; every forward of every step
runs the passes the plan gives that step (counted as calls of the model's looped layer)."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from fixedfirst.compute import measured
from fixedfirst.model import handles
from fixedfirst.scheduling import hf_trainer
from fixedfirst.scheduling.depth_scheduler import DepthScheduler
from tests.inkling_helpers import PassCounter, needs_inkling

PAGE = Path(__file__).resolve().parents[1] / "docs" / "guides" / "any-loop.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.M | re.S)


def test_the_page_shows_a_complete_loop_of_about_forty_lines():
    blocks = python_blocks(PAGE.read_text())
    assert len(blocks) == 4
    lines = [line for line in blocks[0].splitlines() if line.strip()]
    assert 35 <= len(lines) <= 48  # a tenth of them the tiny model's configuration
    assert "for step in range(plan.total_steps):" in blocks[0]


@needs_inkling
def test_the_pages_loops_run_the_plans_passes_step_by_step(tmp_path, monkeypatch):
    counter = PassCounter()
    steps: list[tuple[DepthScheduler, int] | None] = []  # each forward's (scheduler, step)
    current: list[tuple[DepthScheduler, int]] = []
    attached: list = []
    real_handle, real_begin = handles.depth_handle, DepthScheduler.begin

    recurrent: list[tuple[DepthScheduler | None, int | None, int]] = []  # Huginn-style forwards
    calls = [0]

    def count_recurrent(model) -> None:
        def start(*args):
            calls[0] = 0

        def count(*args):
            calls[0] += 1

        def end(*args):
            tag = current[0] if current else (None, None)
            recurrent.append((*tag, calls[0]))

        model.register_forward_pre_hook(start)
        model.core.register_forward_pre_hook(count)
        model.register_forward_hook(end)

    def handle(model, set_depth=None, forward_kwarg=None):  # counted from its first handle on
        if not any(m is model for m in attached):
            if forward_kwarg is None:
                counter.attach(model)
            else:
                count_recurrent(model)
            attached.append(model)
        return real_handle(model, set_depth, forward_kwarg)

    def begin(self, step):
        current[:] = [(self, step)]
        return real_begin(self, step)

    def end(*args, **kwargs):
        PassCounter.end(counter)
        steps.append(current[0] if current else None)  # None: measuring, before any step

    # Every module that took the name at its import gets the counting one, and gets the real one
    # back afterwards: a module first imported while only `handles` was patched kept the
    # counting function for the rest of the process (tests/test_trainer_callback.py then failed).
    for module in (handles, hf_trainer, measured):
        monkeypatch.setattr(module, "depth_handle", handle)
    monkeypatch.setattr(DepthScheduler, "begin", begin)
    monkeypatch.setattr(counter, "end", end)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "guide"}
    for block in python_blocks(PAGE.read_text()):
        exec(compile(block, str(PAGE), "exec"), namespace)

    runs: dict[DepthScheduler, dict[int, list[int]]] = {}  # the loop's, then the Trainer's
    for tag, passes in zip(steps, counter.passes, strict=True):
        if tag is not None:
            runs.setdefault(tag[0], defaultdict(list))[tag[1]].append(passes)
    (loop, loop_passes), (trainer, trainer_passes) = runs.items()
    assert loop_passes == {s: [loop.plan.depth(s)] for s in range(60)}  # one forward a step
    assert {loop.plan.at(s).phase for s in range(42)} == {"fixed"} and loop.switch_step == 42
    assert trainer_passes == {s: [trainer.plan.depth(s)] * 2 for s in range(30)}  # accumulation
    ran = [*loop_passes.values(), *trainer_passes.values()]
    assert {p for passes in ran for p in passes} == {1, 2, 3, 4}
    huginn = namespace["scheduler"]  # the page's last loop: the Huginn-style model's
    assert huginn not in (loop, trainer)
    ran = [(step, passes) for tagged, step, passes in recurrent if tagged is huginn]
    assert ran == [(s, huginn.plan.depth(s)) for s in range(40)]
    assert {huginn.plan.at(s).phase for s in range(28)} == {"fixed"} and huginn.switch_step == 28
    assert len({passes for _, passes in ran[28:]}) >= 4  # the finish draws from 1..8
    logged = namespace["trainer"].state.log_history
    assert [h["depth"] for h in logged if "depth" in h] == [
        trainer.plan.depth(s) for s in range(4, 30, 5)
    ]
