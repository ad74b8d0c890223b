"""The ovpasses transformations, one per module."""

from ovpasses.passes.attention_head_padding import AttentionHeadPadding
from ovpasses.passes.convert_one_hot16_to_one_hot1 import ConvertOneHot16ToOneHot1
from ovpasses.passes.disable_stateful_sdpa_fusion import DisableStatefulSDPAFusion
from ovpasses.passes.eager_attention_to_sdpa import EagerAttentionToSDPA
from ovpasses.passes.erfinv_constant_folding import ErfInvConstantFolding
from ovpasses.passes.kv_cache_shapeof_decomposition import KVCacheShapeOfDecomposition
from ovpasses.passes.sdpa_decomposition import ScaledDotProductAttentionDecomposition
from ovpasses.passes.shared_kv_cache_unsharing import SharedKVCacheUnsharing
from ovpasses.passes.shared_kv_detection import SharedKVCacheDetection
from ovpasses.passes.sliding_window_cache_bounding import SlidingWindowKVCacheBounding
from ovpasses.passes.sliding_window_cache_trimmable import TrimmableSlidingWindowKVCache
from ovpasses.passes.sliding_window_mask_slice import SlidingWindowMaskSliceInsertion

__all__ = [
    "AttentionHeadPadding",
    "ConvertOneHot16ToOneHot1",
    "DisableStatefulSDPAFusion",
    "EagerAttentionToSDPA",
    "ErfInvConstantFolding",
    "KVCacheShapeOfDecomposition",
    "ScaledDotProductAttentionDecomposition",
    "SharedKVCacheDetection",
    "SlidingWindowKVCacheBounding",
    "SlidingWindowMaskSliceInsertion",
    "SharedKVCacheUnsharing",
    "TrimmableSlidingWindowKVCache",
]
