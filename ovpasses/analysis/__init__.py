"""Analyses: walks that return plain data and change nothing."""

from ovpasses.analysis.kv_sharing import (
    RT_OWNER_OF,
    RT_STATUS,
    RT_VARIABLES,
    CacheInfo,
    KVSharingAnalysis,
    SDPAInfo,
    analyze_kv_sharing,
)

__all__ = ["RT_OWNER_OF", "RT_STATUS", "RT_VARIABLES", "CacheInfo", "KVSharingAnalysis", "SDPAInfo",
           "analyze_kv_sharing"]
