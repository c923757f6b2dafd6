"""Schedule sweeps: a base config and named runs, trained, evaluated and tabulated."""

from fixedfirst.studies.sweep.runner import SweepOutcome, run_sweep
from fixedfirst.studies.sweep.spec import SweepSpec, load_sweep

__all__ = ["SweepOutcome", "SweepSpec", "load_sweep", "run_sweep"]
