"""Where batches come from: the `BatchSource` interface and the sources that implement it."""

from fixedfirst.data.source import Batch, BatchSource, build_source

__all__ = ["Batch", "BatchSource", "build_source"]
