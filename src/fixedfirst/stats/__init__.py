"""Statistics of results over seeds: confidence intervals and the verdicts they support."""
