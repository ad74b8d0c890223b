"""ovpasses: OpenVINO graph transformations for models whose KV caches are shared between layers."""

from ovpasses.analysis import KVSharingAnalysis, analyze_kv_sharing
from ovpasses.features.old_runtimes.analysis import OpVersionAnalysis, analyze_op_versions
from ovpasses.errors import (
    DeviceNotAvailableError,
    InvalidOptionError,
    OvpassesError,
    PassInvariantError,
    UnreadableOperationError,
    UnsupportedModelError,
    UnknownPassError,
    UnsupportedRuntimeError,
)
from ovpasses import passes
from ovpasses.registry import PIPELINE_ORDER
from ovpasses.options import FirstPrompt, KVSharing, PagedHeads, RewriteOptions, SlidingWindow
from ovpasses.compiling import compile_model
from ovpasses.pipeline import rewrite
from ovpasses.plan.decisions import plan
from ovpasses.features.sliding_window.trim import SlidingWindowTrimmer
from ovpasses.plan.profiles import RuntimeProfile, profile_for
from ovpasses.summary import RewriteSummary

__version__ = "0.1.0"

# Every pass of the pipeline by its public name, ovpasses.<Pass> (the shared ones and each feature's).
globals().update({rule.__name__: rule for rule in PIPELINE_ORDER})

__all__ = [
    *sorted(rule.__name__ for rule in PIPELINE_ORDER),
    "DeviceNotAvailableError",
    "InvalidOptionError",
    "KVSharing",
    "KVSharingAnalysis",
    "OpVersionAnalysis",
    "OvpassesError",
    "FirstPrompt",
    "PagedHeads",
    "PassInvariantError",
    "RewriteOptions",
    "RewriteSummary",
    "RuntimeProfile",
    "SlidingWindow",
    "SlidingWindowTrimmer",
    "UnknownPassError",
    "UnreadableOperationError",
    "UnsupportedModelError",
    "UnsupportedRuntimeError",
    "analyze_kv_sharing",
    "analyze_op_versions",
    "compile_model",
    "plan",
    "profile_for",
    "rewrite",
]
