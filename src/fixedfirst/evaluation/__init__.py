"""Evaluating a trained model: validation NLL at many serving depths (during training and of a
finished run, cached beside it) and a task's own metric."""
