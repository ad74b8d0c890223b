"""ovpasses: OpenVINO graph transformations for models whose KV caches are shared between layers."""

from ovpasses.analysis import KVSharingAnalysis, analyze_kv_sharing
from ovpasses.errors import (
    DeviceNotAvailableError,
    OvpassesError,
    PassInvariantError,
    UnsupportedModelError,
)
from ovpasses.passes import (
    DisableStatefulSDPAFusion,
    KVCacheShapeOfDecomposition,
    ScaledDotProductAttentionDecomposition,
    SharedKVCacheDetection,
    SharedKVCacheUnsharing,
)
from ovpasses.pipeline import RewriteSummary, RuntimeProfile, compile_model, plan, profile_for, rewrite

__version__ = "0.1.0"

__all__ = [
    "DeviceNotAvailableError",
    "DisableStatefulSDPAFusion",
    "KVCacheShapeOfDecomposition",
    "KVSharingAnalysis",
    "OvpassesError",
    "PassInvariantError",
    "RewriteSummary",
    "RuntimeProfile",
    "ScaledDotProductAttentionDecomposition",
    "SharedKVCacheDetection",
    "SharedKVCacheUnsharing",
    "UnsupportedModelError",
    "analyze_kv_sharing",
    "compile_model",
    "plan",
    "profile_for",
    "rewrite",
]
