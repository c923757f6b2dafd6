"""Training: the loop, its optimizer, checkpoints, metrics and progress display."""
