"""Coverage of the diagnostic's 95% intervals on simulated crossed designs, as a Markdown table.

X[b, j] = mu + u_b + v_j + e_bj (B = J = 24 and 32, normal effects); for each set of standard
deviations and five simulation seeds, the share of 300 replications whose interval covers mu:
the two-way bootstrap (`fixedfirst.stats.intervals.two_way_bootstrap`, 1000 resamples) and the
t-interval over row means (what the diagnostic reported before). The output is committed as
docs/diagnose/bootstrap-coverage.md:

    OMP_NUM_THREADS=1 python scripts/bootstrap_coverage.py > docs/diagnose/bootstrap-coverage.md
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.crossed_simulation import coverage

SCENARIOS = [  # (batch sd, sequence sd, interaction sd)
    (1.0, 2.0, 1.0),
    (1.0, 1.0, 1.0),
    (1.0, 1.0, 0.0),
    (1.0, 1.0, 5.0),
    (0.0, 0.0, 1.0),
]
SEEDS = range(5)

print("# Coverage of the update diagnostic's 95% intervals (simulation)\n")
print("Produced by `OMP_NUM_THREADS=1 python scripts/bootstrap_coverage.py` (see its docstring).")
print("Each cell: the smallest and largest share, over 5 simulation seeds, of 300 replications")
print("of X[b, j] = mu + u_b + v_j + e_bj whose 95% interval covers mu.\n")
print(
    "| B x J | sd(u_b) batch | sd(v_j) sequence | sd(e_bj) interaction | two-way bootstrap "
    "| t over batches |"
)
print("| ---: | ---: | ---: | ---: | :---: | :---: |")
for size in (24, 32):
    for row_sd, column_sd, noise_sd in SCENARIOS:
        results = [
            coverage(row_sd, column_sd, noise_sd, rows=size, columns=size, seed=seed)
            for seed in SEEDS
        ]
        cells = [
            f"{100 * min(shares):.1f}-{100 * max(shares):.1f}%"
            for shares in ([r[i] for r in results] for i in (0, 1))
        ]
        print(
            f"| {size} x {size} | {row_sd:g} | {column_sd:g} | {noise_sd:g} | "
            + " | ".join(cells)
            + " |"
        )
