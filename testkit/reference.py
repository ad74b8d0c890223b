"""Float64 NumPy references written from the OpenVINO operation specifications.

They never call OpenVINO or ovpasses code: they are what the passes are checked against.
"""

from __future__ import annotations

import numpy as np


def sdpa_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None,
                   scale: float | np.ndarray | None = None, causal: bool = False) -> np.ndarray:
    """ScaledDotProductAttention-13 in float64, line by line from the specification's pseudo-code.

    K and V batch dimensions broadcast against Q's as MatMul's do (numpy rules).
    """
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    L, S = q.shape[-2], k.shape[-2]
    if scale is None:
        scale = 1.0 / np.sqrt(np.float64(q.shape[-1]))
    scale = np.asarray(scale, dtype=np.float64)
    attn_bias = np.zeros((L, S), dtype=np.float64)
    if causal:
        attn_bias = np.triu(np.full((L, S), -np.inf), k=1)
    elif mask is not None:
        mask = np.asarray(mask)
        if mask.dtype == np.bool_:
            attn_bias = np.where(np.logical_not(mask), -np.inf, 0.0)
        else:
            attn_bias = attn_bias + mask.astype(np.float64)
    attn_weight = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    attn_weight = attn_weight + attn_bias
    attn_weight = softmax(attn_weight, axis=-1)
    return np.matmul(attn_weight, v)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax-8: exp(x - max) / sum(exp(x - max)). A row that is all -inf gives NaN, as in OpenVINO."""
    with np.errstate(invalid="ignore"):
        shifted = x - np.max(x, axis=axis, keepdims=True)
        e = np.exp(shifted)
        return e / np.sum(e, axis=axis, keepdims=True)


def erfinv_reference(x: float) -> float:
    """ErfInv-17 of one value in float64, by bisection on ``math.erf`` (``math.erfc`` where ``|x| > 0.5``):
    the ``y`` with ``erf(y) = x``; ``erfinv(±1) = ±inf``; NaN for ``|x| > 1`` and NaN.

    Bisection, not the Newton iteration ovpasses folds with: it halves ``[0, 30]`` until the two ends are
    adjacent float64 values and returns the one whose ``erf`` is closer to ``|x|``.
    """
    import math

    if math.isnan(x) or abs(x) > 1:
        return math.nan
    if abs(x) == 1:
        return math.copysign(math.inf, x)
    a, tail = abs(x), abs(x) > 0.5
    rest = 1.0 - a   # exact for a >= 0.5

    def residual(y: float) -> float:   # erf(y) - a, computed where it does not cancel
        return rest - math.erfc(y) if tail else math.erf(y) - a

    lo, hi = 0.0, 30.0
    while True:
        mid = (lo + hi) / 2
        if mid <= lo or mid >= hi:
            break
        lo, hi = (mid, hi) if residual(mid) < 0 else (lo, mid)
    return math.copysign(min((lo, hi), key=lambda y: abs(residual(y))), x)


def one_hot_reference(indices: np.ndarray, depth: int, on_value, off_value, axis: int,
                      negative_indices_mode: str = "ignore_negative") -> np.ndarray:
    """OneHot-16 from its specification: ``on_value`` where ``indices == i`` at the new ``axis`` position,
    ``off_value`` elsewhere; with ``normalize``, an index in ``[-depth, -1]`` counts as ``depth + index``."""
    indices = np.asarray(indices)
    if negative_indices_mode == "normalize":
        indices = np.where((indices < 0) & (indices >= -depth), indices + depth, indices)
    axis = axis % (indices.ndim + 1)
    positions = np.arange(depth).reshape([-1 if d == axis else 1 for d in range(indices.ndim + 1)])
    hit = np.expand_dims(indices, axis) == positions
    return np.where(hit, on_value, off_value)
