"""The progress display: an ETA from the work done, and the figure legend's smoothing window."""

from __future__ import annotations

import io

import pytest

from fixedfirst.progress import Progress
from fixedfirst.studies.sweep.figure3 import MIN_WINDOW, _window_label


def test_eta_follows_the_work_not_the_steps():
    """A fixed-first run: 60 cheap steps done (10% of the FLOPs) in 60 s; 40 dear ones left
    (90% of the FLOPs). The step rate would promise 40 s; the work rate says 540 s."""
    progress = Progress(100, quiet=True, work_total=1000.0)
    now = progress.start + 60.0
    assert progress.eta_seconds(60, 100.0, now) == pytest.approx(540.0)
    by_steps = Progress(100, quiet=True)
    assert by_steps.eta_seconds(60, None, by_steps.start + 60.0) == pytest.approx(40.0)


def test_eta_after_resume_counts_only_this_invocation():
    progress = Progress(100, initial=50, quiet=True, work_total=1000.0, work_initial=500.0)
    assert progress.eta_seconds(50, 500.0, progress.start + 1.0) is None
    assert progress.eta_seconds(60, 600.0, progress.start + 10.0) == pytest.approx(40.0)


def test_plain_lines_show_the_eta():
    stream = io.StringIO()
    progress = Progress(20, stream=stream, work_total=20.0)
    progress.update(20, {"loss": "1.0"}, work=20.0)
    assert stream.getvalue().startswith("train 20/20  loss 1.0  eta 0:00")


def test_smoothing_legend_names_the_logging_interval():
    assert MIN_WINDOW >= 3
    assert _window_label(4, 10) == "trailing mean of 4 logged steps (one every 10 steps)"
    assert _window_label(8, 1) == "trailing mean of 8 logged steps (every step)"
