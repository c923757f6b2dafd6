"""Tasks: a data source for the trainer plus the evaluation that defines success on it.

`bios`: the synthetic biography recall task (Allen-Zhu & Li 2023), DESIGN.md §6.
"""
