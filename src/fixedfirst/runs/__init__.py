"""A run on disk, for everything that trains, reads or serves one: the run directory and its
rules, checkpoints, what defines a run (its identity), opening a run's model and data, and
opening what is served (a run or an export, with its tokenizer).

It sits below training, evaluation, serving and export, so that reading a run never imports the
trainer (docs/design.md §16).
"""
