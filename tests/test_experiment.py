"""Experiments: a list of runs in one directory; finished runs are reused, changed ones refused."""

from __future__ import annotations

import pytest

from fixedfirst.errors import UserError
from fixedfirst.studies.kit.runs import PlannedRun, run_all
from fixedfirst.train.trainer import Trainer
from tests.trainer_helpers import tiny_config


def test_runs_are_reused_resumed_and_guarded(tmp_path):
    runs = [
        PlannedRun("uniform", tiny_config("schedule.kind=uniform", "train.tokens=1280")),
        PlannedRun("fixed-first", tiny_config("train.tokens=1280")),
    ]
    # An interrupted run already sits in the experiment directory: it is resumed, not restarted.
    Trainer(runs[1].config, str(tmp_path / "runs" / "fixed-first"), quiet=True).train(stop_after=3)
    first = run_all(runs, tmp_path, quiet=True)
    assert [o.reused for o in first] == [False, False]
    assert all(o.summary["steps"] == 10 for o in first)
    second = run_all(runs, tmp_path, quiet=True)
    assert [o.reused for o in second] == [True, True]
    assert second[0].summary == first[0].summary
    changed = [PlannedRun("uniform", tiny_config("schedule.kind=uniform", "train.tokens=2560"))]
    with pytest.raises(UserError, match=r"different configuration \(train.tokens\)"):
        run_all(changed, tmp_path, quiet=True)
    with pytest.raises(UserError, match="unique"):
        run_all([runs[0], runs[0]], tmp_path, quiet=True)
