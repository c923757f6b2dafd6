"""The studies, above the library and the tasks: bios Figure 1, chains, sweeps and the ablation
each train a list of runs through the one study runner (`side_by_side.conduct`), which evaluates
them and writes a report; the update diagnostic has its own flow."""
