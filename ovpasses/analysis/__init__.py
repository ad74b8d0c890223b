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
from ovpasses.analysis.op_versions import OpVersionAnalysis, UnreadableOp, analyze_op_versions

__all__ = ["RT_OWNER_OF", "RT_STATUS", "RT_VARIABLES", "CacheInfo", "KVSharingAnalysis", "SDPAInfo",
           "analyze_kv_sharing", "OpVersionAnalysis", "UnreadableOp", "analyze_op_versions"]
