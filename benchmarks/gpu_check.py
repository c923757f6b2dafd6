"""The GPU check, grown into the first run's script: `benchmarks/first_run.py` (read it for what
it checks). This command still works, with its flags (--steps, --no-compile) and the first run's
(--out, --budget, --smoke); the output goes to first-run-output/ unless --out says where.

    PYTHONPATH=src python3 benchmarks/gpu_check.py [--steps 5] [--no-compile]
"""

from __future__ import annotations

import sys

from first_run import main  # benchmarks/, this script's own directory

if __name__ == "__main__":
    sys.exit(main())
