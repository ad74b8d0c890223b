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
