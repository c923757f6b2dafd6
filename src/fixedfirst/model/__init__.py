"""The looped transformer and its parts."""

from fixedfirst.model.kv_cache import KVCache
from fixedfirst.model.looped import LoopedTransformer, check_depth, sample_next

__all__ = ["KVCache", "LoopedTransformer", "check_depth", "sample_next"]
