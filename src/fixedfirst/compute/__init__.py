"""What a run costs: modeled FLOPs of the model and of a schedule, the plan that turns a token or
FLOP budget into steps, and the memory one training process holds (docs/design.md §3, §15)."""
