"""The ovpasses transformations, one per module."""

from ovpasses.features.paged_heads.attention_head_padding import AttentionHeadPadding
from ovpasses.features.old_runtimes.convert_one_hot16_to_one_hot1 import ConvertOneHot16ToOneHot1
from ovpasses.passes.disable_stateful_sdpa_fusion import DisableStatefulSDPAFusion
from ovpasses.features.sdpa_recovery.eager_attention_to_sdpa import EagerAttentionToSDPA
from ovpasses.features.old_runtimes.erfinv_constant_folding import ErfInvConstantFolding
from ovpasses.passes.kv_cache_shapeof_decomposition import KVCacheShapeOfDecomposition
from ovpasses.passes.sdpa_decomposition import ScaledDotProductAttentionDecomposition
from ovpasses.features.unsharing.shared_kv_cache_unsharing import SharedKVCacheUnsharing
from ovpasses.passes.shared_kv_detection import SharedKVCacheDetection
from ovpasses.features.sliding_window.sliding_window_cache_bounding import SlidingWindowKVCacheBounding
from ovpasses.features.sliding_window.first_prompt import BlockedFirstPrompt
from ovpasses.features.sliding_window.mask_expand import SDPAMaskExpandElimination
from ovpasses.features.sliding_window.release_points import SDPAReleasePoints
from ovpasses.features.sliding_window.sliding_window_cache_trimmable import TrimmableSlidingWindowKVCache
from ovpasses.features.sliding_window.sliding_window_mask_slice import SlidingWindowMaskSliceInsertion
from ovpasses.features.unfused_expands.unfused_sdpa_expands import UnfusedSDPAExpandRewrite

# Every pass, in the order ovpasses.pipeline.STEPS runs them (tests/test_pipeline.py checks it): the names
# RewriteOptions(passes=...) takes.
PIPELINE_ORDER: tuple[type, ...] = (
    EagerAttentionToSDPA,
    SharedKVCacheDetection,
    SharedKVCacheUnsharing,
    AttentionHeadPadding,
    DisableStatefulSDPAFusion,
    ScaledDotProductAttentionDecomposition,
    KVCacheShapeOfDecomposition,
    SlidingWindowMaskSliceInsertion,
    SlidingWindowKVCacheBounding,
    TrimmableSlidingWindowKVCache,
    UnfusedSDPAExpandRewrite,
    BlockedFirstPrompt,
    SDPAReleasePoints,
    SDPAMaskExpandElimination,
    ErfInvConstantFolding,
    ConvertOneHot16ToOneHot1,
)

__all__ = [
    "AttentionHeadPadding",
    "BlockedFirstPrompt",
    "ConvertOneHot16ToOneHot1",
    "DisableStatefulSDPAFusion",
    "EagerAttentionToSDPA",
    "ErfInvConstantFolding",
    "KVCacheShapeOfDecomposition",
    "SDPAMaskExpandElimination",
    "SDPAReleasePoints",
    "ScaledDotProductAttentionDecomposition",
    "SharedKVCacheDetection",
    "SlidingWindowKVCacheBounding",
    "SlidingWindowMaskSliceInsertion",
    "SharedKVCacheUnsharing",
    "TrimmableSlidingWindowKVCache",
    "UnfusedSDPAExpandRewrite",
]
