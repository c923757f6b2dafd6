"""The studies, above the library and the tasks, each a leaf on the study kit (`kit/`, which
imports no study): bios Figure 1, chains, sweeps, the ablation (which composes bios and chains),
the looped mixture-of-experts, finishing stages and serving economics, each a `Study` handed to
the one flow (`kit.conduct`) that trains its runs, evaluates them and writes a report; the update
diagnostic has its own flow."""
