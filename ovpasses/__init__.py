"""ovpasses: OpenVINO graph transformations for models whose KV caches are shared between layers."""

from ovpasses.errors import (
    DeviceNotAvailableError,
    OvpassesError,
    PassInvariantError,
    UnsupportedModelError,
)
from ovpasses.passes import ScaledDotProductAttentionDecomposition

__version__ = "0.1.0"

__all__ = [
    "DeviceNotAvailableError",
    "OvpassesError",
    "PassInvariantError",
    "ScaledDotProductAttentionDecomposition",
    "UnsupportedModelError",
]
