"""The auto switch of a fixed-first schedule (docs/design.md §14): when a run stops training at K0.

trend.py    the least-squares slope of a short noisy series and its standard error
policy.py   floor, ceiling and rule: observations in, the switch step out (pure; `replay`)

The policy is asked by `scheduling.DepthScheduler`, in anyone's loop and in the trainer; the
trainer's probes are `train/switch_probe.py`, what a run keeps of its switch `train/auto_switch.py`.
"""
