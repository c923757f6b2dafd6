"""Hugging Face `transformers` export: `fixedfirst export RUN --out DIR --format hf`.

`export.py` writes the directory, `tokenizer.py` the tokenizer files, and `modeling_fixedfirst.py`
is the model itself, copied into the directory: it imports torch and transformers only, never
fixedfirst, and this package never imports it (transformers is an optional dependency,
`fixedfirst[hf]`).
"""

from fixedfirst.export.hf.export import export_hf

__all__ = ["export_hf"]
