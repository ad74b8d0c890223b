"""The transformations several features share, one per module. Every pass of the pipeline, a feature's too, is
``ovpasses.<Pass>`` (:data:`ovpasses.registry.PIPELINE_ORDER` lists them in the order they run)."""

from ovpasses.passes.disable_stateful_sdpa_fusion import DisableStatefulSDPAFusion
from ovpasses.passes.kv_cache_shapeof_decomposition import KVCacheShapeOfDecomposition
from ovpasses.passes.sdpa_decomposition import ScaledDotProductAttentionDecomposition
from ovpasses.passes.shared_kv_detection import SharedKVCacheDetection

__all__ = [
    "DisableStatefulSDPAFusion",
    "KVCacheShapeOfDecomposition",
    "ScaledDotProductAttentionDecomposition",
    "SharedKVCacheDetection",
]
