"""Schedule sweeps: a base config and named runs, trained, evaluated and tabulated."""

from fixedfirst.studies.sweep.runner import not_finished, run_sweep
from fixedfirst.studies.sweep.spec import SweepSpec, load_sweep

__all__ = ["SweepSpec", "load_sweep", "not_finished", "run_sweep"]
