"""fixedfirst: adaptive-depth looped transformers and the fixed-first depth schedule.

The public names are imported lazily so that the command line starts without loading torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "DepthScheduler": "fixedfirst.scheduling.depth_scheduler",
    "FixedFirstCallback": "fixedfirst.scheduling.hf_trainer",
    "KLExit": "fixedfirst.serve",
    "LoopedTransformer": "fixedfirst.model",
    "ModelConfig": "fixedfirst.config",
    "RunConfig": "fixedfirst.config",
    "RunPlan": "fixedfirst.compute.plan",
    "Schedule": "fixedfirst.schedules",
    "ScheduleConfig": "fixedfirst.config",
    "SwitchConfig": "fixedfirst.config",
    "UserError": "fixedfirst.errors",
    "depth_handle": "fixedfirst.model.handles",
    "load": "fixedfirst.runs.exported",
    "load_config": "fixedfirst.config",
    "load_served": "fixedfirst.runs.served",
    "measure_flops": "fixedfirst.compute.measured",
    "plan_schedule": "fixedfirst.compute.plan",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'fixedfirst' has no attribute {name!r}")
