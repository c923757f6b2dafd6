"""Where batches come from: the `BatchSource` interface and the sources that implement it."""

from fixedfirst.data.prepared import data_vocab_size
from fixedfirst.data.source import Batch, BatchSource, build_source
from fixedfirst.data.tokenizer import load_tokenizer
from fixedfirst.data.tokens import TokenSource

__all__ = [
    "Batch",
    "BatchSource",
    "TokenSource",
    "build_source",
    "data_vocab_size",
    "load_tokenizer",
]
