"""The ovpasses transformations, one per module."""

from ovpasses.passes.sdpa_decomposition import ScaledDotProductAttentionDecomposition

__all__ = ["ScaledDotProductAttentionDecomposition"]
