"""Where batches come from: the `BatchSource` interface, the registry of data kinds, and the
sources of your own text (`fixedfirst prepare` shards) and of a toy language."""

from fixedfirst.data.prepared import data_vocab_size
from fixedfirst.data.registry import (
    DataKind,
    build_source,
    data_kind,
    register_kind,
    resolve_data,
)
from fixedfirst.data.source import Batch, BatchSource
from fixedfirst.data.synthetic import SyntheticSource
from fixedfirst.data.tokenizer import load_tokenizer
from fixedfirst.data.tokens import TokenSource

__all__ = [
    "Batch",
    "BatchSource",
    "DataKind",
    "SyntheticSource",
    "TokenSource",
    "build_source",
    "data_kind",
    "data_vocab_size",
    "load_tokenizer",
    "register_kind",
    "resolve_data",
]
