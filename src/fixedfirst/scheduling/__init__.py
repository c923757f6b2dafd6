"""Fixed-first followed step by step in a training loop (docs/guides/any-loop.md): the depth
scheduler that sets each optimizer step's depth from a run's plan and decides its auto switch,
in fixedfirst's trainer and in anyone's loop, and the Hugging Face Trainer callback around it.

depth_scheduler.py  the plan followed step by step, the auto switch agreed on every rank
hf_trainer.py       the Hugging Face Trainer callback (imports transformers)

How a model's depth is set is `model/handles.py`; the compute model of a model we did not write
is `compute/measured.py`.
"""
