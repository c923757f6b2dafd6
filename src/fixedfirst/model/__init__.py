"""The looped transformer and its parts."""

from fixedfirst.model.interface import LoopedLM
from fixedfirst.model.kv_cache import (
    FULL_CACHE,
    LAST_ITERATION,
    BoundedCache,
    CacheStrategy,
    FullCache,
    KVCache,
    parse_cache_strategy,
)
from fixedfirst.model.looped import LoopedTransformer, check_depth, sample_next

__all__ = [
    "FULL_CACHE",
    "LAST_ITERATION",
    "BoundedCache",
    "CacheStrategy",
    "FullCache",
    "KVCache",
    "LoopedLM",
    "LoopedTransformer",
    "check_depth",
    "parse_cache_strategy",
    "sample_next",
]
