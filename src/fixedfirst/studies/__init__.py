"""The studies, above the library and the tasks: each trains a list of runs side by side,
evaluates them and writes a report (bios Figure 1, chains, sweeps, the ablation, the
update diagnostic)."""
