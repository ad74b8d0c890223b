"""The ovpasses transformations, one per module."""

from ovpasses.passes.disable_stateful_sdpa_fusion import DisableStatefulSDPAFusion
from ovpasses.passes.kv_cache_shapeof_decomposition import KVCacheShapeOfDecomposition
from ovpasses.passes.sdpa_decomposition import ScaledDotProductAttentionDecomposition
from ovpasses.passes.shared_kv_cache_unsharing import SharedKVCacheUnsharing
from ovpasses.passes.shared_kv_detection import SharedKVCacheDetection

__all__ = [
    "DisableStatefulSDPAFusion",
    "KVCacheShapeOfDecomposition",
    "ScaledDotProductAttentionDecomposition",
    "SharedKVCacheDetection",
    "SharedKVCacheUnsharing",
]
