"""The update diagnostic (docs/design.md §6, the paper's Figure 4): after how many finishing
updates does a deep update stop beating a shallow one?

    finishing      a run's state at a checkpoint, continued by its own finishing steps
    update_pair    one depth-a and one depth-b update from the same state, RMS-matched, and the
                   held-out NLL per sequence after each
    summary        intervals over training batches and held-out sequences; the headline rule
    runner         the whole measurement over u = 0, 1, 2, ..., 32
    report, figure the printed tables and figure4.png
"""

from fixedfirst.stats.intervals import BootstrapInterval, two_way_bootstrap
from fixedfirst.studies.diagnose.finishing import FinishingChain, RunState, open_run_state
from fixedfirst.studies.diagnose.runner import DiagnoseOptions, Diagnosis, run_diagnostic
from fixedfirst.studies.diagnose.update_pair import (
    HeldoutNLL,
    PairResult,
    UpdatePair,
    state_digest,
)

__all__ = [
    "BootstrapInterval",
    "DiagnoseOptions",
    "Diagnosis",
    "FinishingChain",
    "HeldoutNLL",
    "PairResult",
    "RunState",
    "UpdatePair",
    "open_run_state",
    "run_diagnostic",
    "state_digest",
    "two_way_bootstrap",
]
