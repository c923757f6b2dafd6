"""Fixed-first for any looped model in any training loop (docs/guides/any-loop.md).

handles.py     how to set a model's depth: ours, our Hugging Face export, transformers' Inkling2Loop
measured.py    the compute model of a model we did not write, measured at a few depths
scheduler.py   the plan followed step by step in your own loop, the auto switch on every rank
hf_trainer.py  the Hugging Face Trainer callback (imports transformers)
transformers_model.py  a transformers looped architecture in fixedfirst's own commands
run_model.py   the model a run's [model] names, ours or a transformers one, built and costed
"""
