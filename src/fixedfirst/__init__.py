"""fixedfirst: adaptive-depth looped transformers and the fixed-first depth schedule.

The public names are imported lazily so that the command line starts without loading torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "KLExit": "fixedfirst.serve",
    "LoopedTransformer": "fixedfirst.model",
    "ModelConfig": "fixedfirst.config",
    "RunConfig": "fixedfirst.config",
    "load": "fixedfirst.runs.exported",
    "load_config": "fixedfirst.config",
    "load_served": "fixedfirst.runs.served",
    "Schedule": "fixedfirst.schedules",
    "UserError": "fixedfirst.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'fixedfirst' has no attribute {name!r}")
