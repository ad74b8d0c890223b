"""Synthetic attention graphs: the one builder module that tests, property strategies and benchmarks use.

Two families:

* :class:`AttentionSpec` / :func:`build_attention` — one stateless opset13 SDPA with any input
  combination the operation allows (mask kind and shape, explicit or pre-scaled scale, causal,
  element type, static or dynamic dimensions, GQA through Unsqueeze -> Broadcast -> Reshape).
* :class:`StackSpec` / :func:`build_stack` — a stateful decoder stack the way LLM exporters make it,
  with a KV-sharing layout given as data (see :mod:`ovpasses.testing.stack`).

Each builder has a matching input generator and a float64 reference built from
:mod:`ovpasses.testing.reference`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import openvino as ov
from openvino import opset13 as ops

from ovpasses.testing.reference import sdpa_reference

MaskKind = Literal["none", "bool", "float"]
MaskShape = Literal["full", "heads", "matrix", "scalar"]
ScaleKind = Literal["none", "explicit", "prescaled"]
DType = Literal["f32", "f16", "bf16"]

OUTPUT_NAME = "attention"


@dataclass(frozen=True)
class AttentionSpec:
    """One ScaledDotProductAttention node and what feeds it.

    ``kv_heads < heads`` gives a GQA layout: K and V have ``kv_heads`` heads and reach the SDPA
    through Unsqueeze -> Broadcast -> Reshape, as exporters write it.
    ``mask_shape`` is the shape of the mask input: ``full`` [B, H, L, S], ``heads`` [B, 1, L, S],
    ``matrix`` [L, S], ``scalar`` a float zero (float masks only).
    ``scale="prescaled"`` multiplies Q by ``scale_value`` before the SDPA *and* passes the same value
    as the SDPA's scale, the way some exporters emit it.
    """

    batch: int = 2
    heads: int = 4
    kv_heads: int | None = None
    q_len: int = 5
    kv_len: int = 7
    head_dim: int = 8
    v_head_dim: int | None = None
    mask: MaskKind = "none"
    mask_shape: MaskShape = "full"
    scale: ScaleKind = "none"
    scale_value: float = 0.3
    causal: bool = False
    dtype: DType = "f32"
    dynamic: bool = False

    def __post_init__(self) -> None:
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.mask_shape == "scalar" and self.mask == "bool":
            raise ValueError("a scalar mask is a float zero; boolean masks need a shape")

    @property
    def n_kv_heads(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def dv(self) -> int:
        return self.head_dim if self.v_head_dim is None else self.v_head_dim

    def with_(self, **changes) -> AttentionSpec:
        return replace(self, **changes)


def ov_type(dtype: DType) -> ov.Type:
    return {"f32": ov.Type.f32, "f16": ov.Type.f16, "bf16": ov.Type.bf16}[dtype]


def io_numpy_type(dtype: DType) -> type:
    """The NumPy type of model inputs for ``dtype`` (bf16 models take f32 inputs and convert inside)."""
    return np.float16 if dtype == "f16" else np.float32


def _param(name: str, shape: list[int], dynamic_axes: tuple[int, ...], et: ov.Type) -> ov.Node:
    pshape = ov.PartialShape([-1 if i in dynamic_axes else d for i, d in enumerate(shape)])
    p = ops.parameter(pshape, et, name=name)
    p.output(0).set_names({name})
    return p


def _to_compute_type(node: ov.Node | ov.Output, dtype: DType) -> ov.Node | ov.Output:
    return ops.convert(node, ov.Type.bf16) if dtype == "bf16" else node


def gqa_broadcast(kv: ov.Node | ov.Output, kv_heads: int, heads: int, name: str) -> ov.Node:
    """[B, Hkv, S, D] -> Unsqueeze(2) -> Broadcast to [B, Hkv, heads/Hkv, S, D] -> Reshape [B, heads, S, D]."""
    shape = ops.shape_of(kv, "i64")
    b = ops.gather(shape, ops.constant(np.array([0], np.int64)), ops.constant(np.int64(0)))
    sd = ops.gather(shape, ops.constant(np.array([2, 3], np.int64)), ops.constant(np.int64(0)))
    rep = heads // kv_heads
    target = ops.concat([b, ops.constant(np.array([kv_heads, rep], np.int64)), sd], 0)
    unsq = ops.unsqueeze(kv, ops.constant(np.array([2], np.int64)))
    bc = ops.broadcast(unsq, target)
    out_shape = ops.concat([b, ops.constant(np.array([heads], np.int64)), sd], 0)
    reshaped = ops.reshape(bc, out_shape, special_zero=False)
    reshaped.set_friendly_name(name)
    return reshaped


def build_attention(spec: AttentionSpec) -> ov.Model:
    """A model computing one SDPA as ``spec`` describes. Inputs: q, k, v, [mask]; output ``attention``."""
    io_et = ov.Type.f16 if spec.dtype == "f16" else ov.Type.f32
    et = ov_type(spec.dtype)
    dyn = (0, 2) if spec.dynamic else ()
    B, H, Hkv, L, S, E, Ev = (spec.batch, spec.heads, spec.n_kv_heads, spec.q_len, spec.kv_len,
                              spec.head_dim, spec.dv)
    q_p = _param("q", [B, H, L, E], dyn, io_et)
    k_p = _param("k", [B, Hkv, S, E], dyn, io_et)
    v_p = _param("v", [B, Hkv, S, Ev], dyn, io_et)
    params = [q_p, k_p, v_p]
    q, k, v = (_to_compute_type(p, spec.dtype) for p in (q_p, k_p, v_p))
    if Hkv != H:
        k = gqa_broadcast(k, Hkv, H, "k_gqa")
        v = gqa_broadcast(v, Hkv, H, "v_gqa")

    def scalar(value: float) -> ov.Node:
        return ops.constant(np.array(value, np.float32), dtype=et)

    if spec.scale == "prescaled":
        q = ops.multiply(q, scalar(spec.scale_value))
        q.set_friendly_name("q_prescaled")

    inputs = [q, k, v]
    if spec.mask != "none":
        if spec.mask_shape == "scalar":
            inputs.append(scalar(0.0))
        else:
            mshape = {"full": [B, H, L, S], "heads": [B, 1, L, S], "matrix": [L, S]}[spec.mask_shape]
            mdyn = tuple(i for i, d in enumerate(mshape) if spec.dynamic and d in (B, L, S))
            m_et = ov.Type.boolean if spec.mask == "bool" else io_et
            m_p = _param("mask", mshape, mdyn, m_et)
            params.append(m_p)
            inputs.append(m_p if spec.mask == "bool" else _to_compute_type(m_p, spec.dtype))
    if spec.scale != "none":
        if spec.mask == "none":
            # the scale is input 4: a mask must stand before it; a zero float mask adds nothing
            inputs.append(scalar(0.0))
        inputs.append(scalar(spec.scale_value))

    sdpa = ops.scaled_dot_product_attention(*inputs, causal=spec.causal)
    sdpa.set_friendly_name("sdpa")
    out = ops.convert(sdpa, ov.Type.f32) if spec.dtype == "bf16" else sdpa
    result = ops.result(out)
    result.output(0).set_names({OUTPUT_NAME})
    out.output(0).set_names({OUTPUT_NAME})
    return ov.Model([result], params, "attention")


def attention_inputs(spec: AttentionSpec, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for :func:`build_attention`. Boolean masks keep at least one key per row."""
    rng = np.random.default_rng(seed)
    nt = io_numpy_type(spec.dtype)
    B, H, Hkv, L, S, E, Ev = (spec.batch, spec.heads, spec.n_kv_heads, spec.q_len, spec.kv_len,
                              spec.head_dim, spec.dv)
    data = {
        "q": rng.standard_normal((B, H, L, E)).astype(nt),
        "k": rng.standard_normal((B, Hkv, S, E)).astype(nt),
        "v": rng.standard_normal((B, Hkv, S, Ev)).astype(nt),
    }
    if spec.mask != "none" and spec.mask_shape != "scalar":
        mshape = {"full": (B, H, L, S), "heads": (B, 1, L, S), "matrix": (L, S)}[spec.mask_shape]
        if spec.mask == "bool":
            m = rng.random(mshape) > 0.3
            m[..., 0] = True
            data["mask"] = m
        else:
            data["mask"] = (rng.standard_normal(mshape) * 2.0).astype(nt)
    return data


def attention_reference(spec: AttentionSpec, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The float64 reference output of :func:`build_attention` for ``inputs``.

    The inputs are first rounded to the model's compute element type, as the model sees them.
    """
    def as_compute(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, np.float64)
        if spec.dtype == "f16":
            return x.astype(np.float16).astype(np.float64)
        if spec.dtype == "bf16":
            return round_to_bf16(x)
        return x.astype(np.float32).astype(np.float64)

    q, k, v = (as_compute(inputs[n]) for n in ("q", "k", "v"))
    rep = spec.heads // spec.n_kv_heads
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    scale = None
    if spec.scale != "none":
        scale = as_compute(np.float64(spec.scale_value))
        if spec.scale == "prescaled":
            # the model computes Q * s in its element type, then the SDPA applies s again
            q = as_compute(q * scale)
    mask = None
    if spec.mask != "none":
        if spec.mask_shape == "scalar":
            mask = np.float64(0.0)
        else:
            mask = inputs["mask"] if spec.mask == "bool" else as_compute(inputs["mask"])
    return sdpa_reference(q, k, v, mask, scale, spec.causal)


def round_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round float64 values to bfloat16 (round to nearest even), returned as float64."""
    f = np.asarray(x, np.float64).astype(np.float32)
    bits = f.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return rounded.view(np.float32).astype(np.float64)
