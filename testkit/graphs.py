"""Synthetic attention graphs: the one builder module that tests, property strategies and benchmarks use.

Three families:

* :class:`AttentionSpec` / :func:`build_attention` — one stateless opset13 SDPA with any input
  combination the operation allows (mask kind and shape, explicit or pre-scaled scale, causal,
  element type, static or dynamic dimensions, GQA through Unsqueeze -> Broadcast -> Reshape).
* :class:`StackSpec` / :func:`build_stack` — a stateful decoder stack the way LLM exporters make it,
  with a KV-sharing layout given as data, and recurrent layers (a conv state, or a linear-attention
  state scanned in a Loop) before the attention of some layers, as hybrid models have them.
* :class:`CacheLoopSpec` / :func:`build_cache_loop` — one stateful attention layer whose cache a
  Loop also reads: a reader inside a body that the KV-sharing analysis does not look into.
* :class:`HeadsStackSpec` / :func:`build_heads_stack` — a stateful decoder with LLM inputs
  (``input_ids``, ...) that the PagedAttention converter accepts, with a head layout per layer.
* :class:`NewerOpsSpec` / :func:`build_newer_ops` — operations that older runtimes cannot read from an
  IR file (ErfInv-17 on a Constant or on an input, OneHot-16), at the top level or in a Loop body.
  Needs a runtime whose Python API has them (2026.2 and newer).
* :class:`RMSNormSpec` / :func:`build_rms_norm` — one RMS normalization over the last axis, in the
  exporters' form (``Power(x, 2)``) or with the square as ``Multiply(x, x)``.
* :class:`EagerAttentionSpec` / :func:`build_eager_attention` — one eager attention subgraph (MatMul ->
  [scale] -> [mask] -> Softmax -> MatMul) in the forms exporters write, and ones that are not SDPA (a
  softcap, a dropout, ...): the input of SDPA recovery.

Each builder has a matching input generator and a float64 reference built from
:mod:`testkit.reference`.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np
import openvino as ov
from openvino import opset13 as ops

from ovpasses._ov import infer
from ovpasses.precision import round_to_bf16  # noqa: F401  (tests import it from here)
from testkit.reference import sdpa_reference

MaskKind = Literal["none", "bool", "float"]
MaskShape = Literal["full", "heads", "matrix", "scalar"]
ScaleKind = Literal["none", "explicit", "prescaled"]
DType = Literal["f32", "f16", "bf16"]

OUTPUT_NAME = "attention"


@dataclass(frozen=True)
class _HeadsSpec:
    """What the attention specs share: the sizes (``kv_heads`` None: as many as ``heads``) and ``with_``."""

    batch: int = 2
    heads: int = 4
    kv_heads: int | None = None
    q_len: int = 5
    kv_len: int = 7
    head_dim: int = 8

    @property
    def n_kv_heads(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads

    def with_(self, **changes):
        return replace(self, **changes)


def round_to(x, dtype: DType) -> np.ndarray:
    """float64 values rounded to ``dtype`` (f32, f16 or bf16), returned as float64."""
    x = np.asarray(x, np.float64)
    if dtype == "f16":
        return x.astype(np.float16).astype(np.float64)
    return round_to_bf16(x) if dtype == "bf16" else x.astype(np.float32).astype(np.float64)


@dataclass(frozen=True)
class AttentionSpec(_HeadsSpec):
    """One ScaledDotProductAttention node and what feeds it.

    ``kv_heads < heads`` gives a GQA layout: K and V have ``kv_heads`` heads and reach the SDPA
    through Unsqueeze -> Broadcast -> Reshape, as exporters write it.
    ``mask_shape`` is the shape of the mask input: ``full`` [B, H, L, S], ``heads`` [B, 1, L, S],
    ``matrix`` [L, S], ``scalar`` a float zero (float masks only).
    ``scale="prescaled"`` multiplies Q by ``scale_value`` before the SDPA *and* passes the same value
    as the SDPA's scale, the way some exporters emit it.
    """

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
    def dv(self) -> int:
        return self.head_dim if self.v_head_dim is None else self.v_head_dim


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
        return round_to(x, spec.dtype)

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


# --------------------------------------------------------------------------------------------------
# Stateful decoder stacks with a KV-sharing layout
# --------------------------------------------------------------------------------------------------

StackMask = Literal["none", "causal", "bool", "float", "sliding"]
Layout = Literal["BHSD", "BSHD"]
GqaForm = Literal["shapeof", "bidirectional"]
PastLengthAt = Literal["concat", "gather", "readvalue"]
BorrowPath = Literal["concat", "own_concat"]
RecurrentForm = Literal["conv", "scan"]

STACK_OUTPUT = "hidden_out"
PAST_LENGTH_WEIGHT = 1e-3
MASK_MIN = float(np.finfo(np.float32).min)   # the additive mask's "not seen", as transformers writes it
SCAN_L2_EPS = 1e-6                             # recurrent_form="scan": NormalizeL2's eps on q and k
CONV_KERNEL = 3                               # recurrent_form="conv": the kernel K; the state keeps K - 1 positions


def _mask_min(et: ov.Type) -> float:
    """MASK_MIN in the mask's element type: transformers writes ``torch.finfo(dtype).min``, so an f16 model's mask
    holds -65504, not float32's minimum (which is -inf in f16, and makes a fully masked row NaN)."""
    return float(np.finfo(np.float16).min) if et == ov.Type.f16 else MASK_MIN


@dataclass(frozen=True)
class StackSpec:
    """A stateful decoder stack as an LLM exporter writes it, with the KV-sharing layout as data.

    ``k_source[i]`` says where layer ``i`` takes its K from: ``i`` (it owns a cache), an earlier layer
    ``j`` that owns one (it borrows that cache: it reads layer j's Concat(past, new)), or ``None``
    (stateless: K from the current tokens only). ``v_source`` does the same for V; ``None`` means
    "as ``k_source``" (K and V shared jointly). A cache owner per layer and kind is::

        ReadValue(var) -> [Convert] -> [Gather(beam_idx)] -> Concat(past, new) -> [Convert] -> Assign(var)

    and the Concat reaches each reading SDPA through ``[Transpose]`` (layout BSHD) and, when
    ``kv_heads < heads``, Unsqueeze -> Broadcast -> Reshape. ``past_length_from`` lists layers whose
    cache also feeds a ShapeOf that computes the past length (Gemma 4 exports have one on layer 0);
    ``past_length_at`` says which node of the cache path it reads.

    ``mask="sliding"`` gives every layer that reads a cache transformers 5's sliding-window mask of
    ``window`` (key ``k`` seen from query ``q`` when ``k <= q``, ``k > q - window`` and the attention_mask
    holds 1 at ``k``), in the form openvino's PagedAttention converter reads
    (:mod:`ovpasses.features.sliding_window.masks`), and the layers in ``full_layers`` the same mask without
    the window; its positions come from the first K cache's past length (``ShapeOf`` of its
    Gather(beam_idx), as optimum-intel's exports compute ``cache_position``)::

        past = ShapeOf(past_k0)[seq]; kv_idx = [0, past + T); q_idx = [past, past + T)
        Select(Broadcast(BitwiseAnd x 4 (kv_idx <= q_idx, kv_idx > q_idx - W, attention_mask[kv_idx])), 0, MIN)
        mask_form="distance": Select(q_idx - kv_idx >= W, MIN, Select(Broadcast(... without the window), 0, MIN))

    ``borrow_path`` says how a borrower reaches its owner's cache: ``"concat"`` (the owner's Concat, as
    optimum-intel exports Gemma 4) or ``"own_concat"``: the borrower builds its own
    ``[Convert] -> [Gather(beam_idx)] -> Concat(past, owner's new)`` on the owner's ReadValue, off the
    Assign's path. The values are the same; the second gives the plugin a cache with a reader its
    stateful fusion does not see. Its Gather axis is an i32 constant and its Concat axis negative, so
    that common-subexpression elimination does not merge it back into the owner's path.

    ``recurrent_layers`` lists layers that have a recurrent block before their attention, as hybrid
    models (Mamba, LFM2, Gated DeltaNet) interleave them: its output is added into the hidden states
    ``x``, so it reaches the K/V projections of every later attention layer, yet its state is not a KV
    cache (:attr:`state_variables`; :meth:`variables`, :meth:`readers` and :meth:`expected_status`
    describe the KV caches only). ``recurrent_form="conv"`` is a depthwise causal convolution of kernel
    K = :data:`CONV_KERNEL` over C = ``hidden`` channels with a state ``conv_BCK1`` [B, C, K-1], as Mamba
    and LFM2 exports write it::

        ReadValue(conv) -> [Gather(beam_idx)] -> Concat(past, Transpose(x @ W_in), axis 2) -> GroupConvolution
            -> Transpose -> @ W_out -> + x                    (weights [C, 1, 1, K], no padding: T outputs)
        Concat -> Slice(-(K-1):, axis 2) -> Assign(conv)

    ``recurrent_form="scan"`` is a linear-attention state ``s_B1CC`` [B, 1, C, C] (as Gated DeltaNet's)
    updated token by token in a Loop over the T new tokens (trip count from ShapeOf(x))::

        ReadValue(s) -> [Gather(beam_idx)] -> Loop(merged s; q, k, v = x @ W_q/k/v as [B, 1, T, C],
                                                     q and k L2-normalised, sliced on axis 2)
            body: s = s * decay + k_t^T @ v_t;  y_t = q_t @ s
        Loop: y concatenated on axis 2 -> Reshape [B, T, C] -> @ W_out -> + x;  final s -> Assign(s)

    Their weights (:func:`recurrent_weights`) come from a generator of their own, so a stack without
    recurrent layers is the graph it always was. Measured on 2026.0.0 and 2026.4.1: the CPU plugin does not
    compile a stack with a conv state at layer 0 read without the Gather(beam_idx) on a dynamic batch
    (``beam_gather=False, dynamic_batch=True``: "Invalid graph status", in f32 too), nor one with a scan state
    there beside f16 values or caches ("Argument shapes are inconsistent" or "Invalid graph status"), and with
    the Gather, f16 conv and scan states on a dynamic batch fail too ("Can not clone with new dims"; measured on
    2026.4.1, 2026-12-07, one unmodified stack in about eight); exporters always write the Gather, in f32. Every
    other form it runs as :func:`stack_reference` computes it (f16 and mixed cache types where it runs the stack
    without recurrent layers).
    """

    k_source: tuple[int | None, ...] = (0, 1, 0, 1)
    v_source: tuple[int | None, ...] | None = None
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 8
    layout: Layout = "BHSD"
    gqa_form: GqaForm = "shapeof"
    cache_type: Literal["f32", "f16"] = "f32"
    beam_gather: bool = True
    past_length_from: tuple[int, ...] = ()
    past_length_at: PastLengthAt = "concat"
    borrow_path: BorrowPath = "concat"
    mask: StackMask = "none"
    window: int = 4                     # mask="sliding": the window W
    # mask="sliding": "bitwise" (transformers 5: BitwiseAnd of the conditions, Broadcast, Select(·, 0, min)) or
    # "distance" (transformers 4: Select(q_idx - kv_idx >= W, min, causal mask)); the same values
    mask_form: Literal["bitwise", "distance"] = "bitwise"
    full_layers: tuple[int, ...] = ()   # mask="sliding": layers that attend without the window
    scale: ScaleKind = "none"
    scale_value: float = 0.25
    dtype: Literal["f32", "f16"] = "f32"
    batch: int = 1
    dynamic_batch: bool = True
    seed: int = 0
    weight_fill: float | None = None   # every projection weight this value (NaN: an IR whose weights are NaN)
    recurrent_layers: tuple[int, ...] = ()   # layers with a recurrent block before their attention
    recurrent_form: RecurrentForm = "conv"

    def __post_init__(self) -> None:
        object.__setattr__(self, "k_source", tuple(self.k_source))
        object.__setattr__(self, "recurrent_layers", tuple(sorted(set(self.recurrent_layers))))
        if self.v_source is not None:
            object.__setattr__(self, "v_source", tuple(self.v_source))
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if len(self.v_sources) != self.num_layers:
            raise ValueError("k_source and v_source must have one entry per layer")
        for kind, sources in (("K", self.k_source), ("V", self.v_sources)):
            for i, src in enumerate(sources):
                if src is None or src == i:
                    continue
                if not (0 <= src < i) or sources[src] != src:
                    raise ValueError(f"layer {i} borrows its {kind} from layer {src}, which owns no {kind} cache "
                                     "earlier in the stack")
        for i, (k, v) in enumerate(zip(self.k_source, self.v_sources)):
            if (k is None) != (v is None):
                raise ValueError(f"layer {i}: K and V must both be stateless or both come from caches")
        for i in self.past_length_from:
            if not 0 <= i < self.num_layers or self.k_source[i] != i:
                raise ValueError(f"past_length_from names layer {i}, which owns no K cache")
        if any(not 0 <= i < self.num_layers for i in self.recurrent_layers):
            raise ValueError(f"recurrent_layers {self.recurrent_layers} names a layer outside 0..{self.num_layers - 1}")
        if self.recurrent_form not in ("conv", "scan"):
            raise ValueError(f"recurrent_form must be 'conv' or 'scan', not {self.recurrent_form!r}")

    @property
    def num_layers(self) -> int:
        return len(self.k_source)

    @property
    def v_sources(self) -> tuple[int | None, ...]:
        return self.k_source if self.v_source is None else self.v_source

    @property
    def hidden(self) -> int:
        return self.heads * self.head_dim

    def with_(self, **changes) -> StackSpec:
        return replace(self, **changes)

    @staticmethod
    def sdpa_name(layer: int) -> str:
        return f"layers.{layer}.self_attn.sdpa"

    @staticmethod
    def variable_id(layer: int, kind: str) -> str:
        return f"past_key_values.{layer}.{kind}"

    @staticmethod
    def state_variable_id(layer: int, form: RecurrentForm) -> str:
        return f"layers.{layer}.conv_state" if form == "conv" else f"layers.{layer}.recurrent_state"

    @staticmethod
    def scan_name(layer: int) -> str:
        """The friendly name of the Loop of a ``scan`` recurrent layer."""
        return f"layers.{layer}.linear_attn.scan"

    @property
    def state_variables(self) -> dict[str, RecurrentForm]:
        """Ground truth: the recurrent states (not KV caches), variable id -> kind (``conv`` or ``scan``),
        in layer order."""
        return {self.state_variable_id(i, self.recurrent_form): self.recurrent_form for i in self.recurrent_layers}

    def sources(self, kind: str) -> tuple[int | None, ...]:
        return self.k_source if kind == "key" else self.v_sources

    def variables(self) -> list[str]:
        """Variable ids in layer order (key before value)."""
        return [self.variable_id(i, kind) for i in range(self.num_layers) for kind in ("key", "value")
                if self.sources(kind)[i] == i]

    def readers(self) -> dict[str, list[str]]:
        """Ground truth: for each cache variable, the SDPAs that read it as K or V, in layer order."""
        out: dict[str, list[str]] = {v: [] for v in self.variables()}
        for i in range(self.num_layers):
            for kind in ("key", "value"):
                src = self.sources(kind)[i]
                if src is not None and self.sdpa_name(i) not in out[self.variable_id(src, kind)]:
                    out[self.variable_id(src, kind)].append(self.sdpa_name(i))
        return out

    def expected_status(self) -> dict[str, str]:
        """Ground truth per SDPA: ``stateless``, ``exclusive`` or ``shared``."""
        readers = self.readers()
        status = {}
        for i in range(self.num_layers):
            name = self.sdpa_name(i)
            read = [v for v, names in readers.items() if name in names]
            if not read:
                status[name] = "stateless"
            elif any(len(readers[v]) > 1 for v in read):
                status[name] = "shared"
            else:
                status[name] = "exclusive"
        return status


def sharing_layout(num_layers: int, num_shared: int, owners_per_kind: int = 2) -> tuple[int | None, ...]:
    """A Gemma-style layout: the last ``num_shared`` layers borrow from the last owner of the same kind.

    Layers alternate over ``owners_per_kind`` attention kinds (e.g. sliding/full); borrower ``i``
    reads the cache of the last owning layer ``j`` with ``j % owners_per_kind == i % owners_per_kind``.
    """
    first_shared = num_layers - num_shared
    if first_shared < owners_per_kind:
        raise ValueError("every attention kind needs an owner before the shared layers")
    out: list[int | None] = []
    for i in range(num_layers):
        if i < first_shared:
            out.append(i)
        else:
            out.append(max(j for j in range(first_shared) if j % owners_per_kind == i % owners_per_kind))
    return tuple(out)


@dataclass
class StackWeights:
    wq: list[np.ndarray]
    wk: list[np.ndarray]
    wv: list[np.ndarray]
    wo: list[np.ndarray]


def stack_weights(spec: StackSpec) -> StackWeights:
    """Seeded float64 weights of a stack (or all ``spec.weight_fill``); the builder rounds them to the
    model's element type."""
    rng = np.random.default_rng(spec.seed)
    h, kvd = spec.hidden, spec.kv_heads * spec.head_dim

    def weight(rows: int, cols: int) -> np.ndarray:
        if spec.weight_fill is not None:
            return np.full((rows, cols), spec.weight_fill)
        return rng.standard_normal((rows, cols)) / np.sqrt(h)

    w = StackWeights([], [], [], [])
    for _ in range(spec.num_layers):
        w.wq.append(weight(h, h))
        w.wk.append(weight(h, kvd))
        w.wv.append(weight(h, kvd))
        w.wo.append(weight(h, h))
    return w


RECURRENT_STREAM = 1   # recurrent_weights' generator is seeded (spec.seed, RECURRENT_STREAM): apart from stack_weights'


@dataclass
class RecurrentWeights:
    """One recurrent layer's float64 weights (C = hidden). ``conv``: ``w_in`` [hidden, C], ``kernel`` [C, K],
    ``w_out`` [C, hidden]. ``scan``: ``wq``, ``wk``, ``wv`` [hidden, C], ``decay`` [C] (per row of the state),
    ``w_out`` [C, hidden]."""

    w_out: np.ndarray
    w_in: np.ndarray | None = None
    kernel: np.ndarray | None = None
    wq: np.ndarray | None = None
    wk: np.ndarray | None = None
    wv: np.ndarray | None = None
    decay: np.ndarray | None = None

    def rounded(self, kind: str) -> RecurrentWeights:
        """The weights rounded to ``kind`` (f32 or f16), as the model holds them, in float64."""
        return RecurrentWeights(**{name: None if value is None else round_to(value, kind)
                                   for name, value in vars(self).items()})


def recurrent_weights(spec: StackSpec) -> dict[int, RecurrentWeights]:
    """Seeded float64 weights of each recurrent layer (projections all ``spec.weight_fill`` when set), from a
    generator apart from :func:`stack_weights`'. The hidden states stay in f16's range through the layers: the scan's
    q and k are L2-normalised per token, so its output is linear in ``x`` (without the norm it was cubic, and five
    scan layers overflowed f16 in the reference and in the plugin alike: measured 2026-12-07)."""
    rng = np.random.default_rng((spec.seed, RECURRENT_STREAM))
    h = spec.hidden

    def weight(rows: int, cols: int, scale: float) -> np.ndarray:
        if spec.weight_fill is not None:
            return np.full((rows, cols), spec.weight_fill)
        return rng.standard_normal((rows, cols)) * scale

    out = {}
    for i in spec.recurrent_layers:
        if spec.recurrent_form == "conv":
            kernel = rng.standard_normal((h, CONV_KERNEL)) / np.sqrt(CONV_KERNEL)
            out[i] = RecurrentWeights(w_in=weight(h, h, h**-0.5), kernel=kernel, w_out=weight(h, h, h**-0.5))
        else:
            out[i] = RecurrentWeights(wq=weight(h, h, 1 / h), wk=weight(h, h, 1 / h), wv=weight(h, h, h**-0.5),
                                      decay=rng.uniform(0.5, 0.95, h), w_out=weight(h, h, 0.5 * h**-0.5))
    return out


def _const(value, et: ov.Type) -> ov.Node:
    return ops.constant(np.asarray(value, np.float32), dtype=et)


def _i64(values) -> ov.Node:
    return ops.constant(np.asarray(values, np.int64))


def _gqa(kv: ov.Output, spec: StackSpec, name: str) -> ov.Output:
    if spec.kv_heads == spec.heads:
        return kv
    if spec.gqa_form == "shapeof":
        return gqa_broadcast(kv, spec.kv_heads, spec.heads, name).output(0)
    rep = spec.heads // spec.kv_heads
    unsq = ops.unsqueeze(kv, _i64([2]))
    bc = ops.broadcast(unsq, _i64([1, 1, rep, 1, 1]), broadcast_spec="BIDIRECTIONAL")
    out = ops.reshape(bc, _i64([0, spec.heads, -1, spec.head_dim]), special_zero=True)
    out.set_friendly_name(name)
    return out.output(0)


def _recurrent_block(spec: StackSpec, layer: int, x_BTH: ov.Output, batch_1: ov.Output, beam: ov.Node | None,
                     et: ov.Type, w: RecurrentWeights) -> tuple[ov.Output, ov.Node]:
    """Layer ``layer``'s recurrent block of :class:`StackSpec` on the hidden states ``x_BTH``: its output
    [B, T, hidden] (to add into ``x``) and the Assign that stores its new state."""
    from openvino.op.util import Variable, VariableInfo

    C, K = spec.hidden, CONV_KERNEL
    B = -1 if spec.dynamic_batch else spec.batch
    conv = spec.recurrent_form == "conv"
    vid = spec.state_variable_id(layer, spec.recurrent_form)
    info = VariableInfo()
    info.data_shape = ov.PartialShape([B, C, K - 1] if conv else [B, 1, C, C])
    info.data_type = et
    info.variable_id = vid
    var = Variable(info)
    zeros = ops.broadcast(_const(0.0, et), ops.concat([batch_1, _i64([C, K - 1] if conv else [1, C, C])], 0))
    rv = ops.read_value(zeros, var)
    rv.set_friendly_name(vid)
    past = rv.output(0)
    if beam is not None:
        past = ops.gather(past, beam, _i64(0)).output(0)

    def proj(t: ov.Output, m: np.ndarray) -> ov.Output:
        return ops.matmul(t, _const(m, et), False, False).output(0)

    if conv:
        x_in_BCT = ops.transpose(proj(x_BTH, w.w_in), _i64([0, 2, 1]))
        cat_BCS = ops.concat([past, x_in_BCT], 2)                                   # S = K - 1 + T
        conv_BCT = ops.group_convolution(cat_BCS, _const(w.kernel.reshape(C, 1, 1, K), et), [1], [0], [0], [1])
        conv_BCT.set_friendly_name(f"layers.{layer}.conv.conv1d")
        y_BTC = ops.transpose(conv_BCT, _i64([0, 2, 1])).output(0)
        new_state = ops.slice(cat_BCS, _i64([-(K - 1)]), _i64([np.iinfo(np.int64).max]), _i64([1]), _i64([2]))
        return proj(y_BTC, w.w_out), ops.assign(new_state, var)

    def per_token(m: np.ndarray) -> ov.Output:
        return ops.unsqueeze(proj(x_BTH, m), _i64([1])).output(0)                   # [B, 1, T, C]

    def l2_normalised(t: ov.Output) -> ov.Output:   # as Gated DeltaNet normalises its q and k per token
        return ops.normalize_l2(t, _i64([3]), SCAN_L2_EPS, "add").output(0)

    q_B1TC, k_B1TC, v_B1TC = l2_normalised(per_token(w.wq)), l2_normalised(per_token(w.wk)), per_token(w.wv)
    # body names unique in the model: reading an IR back renames a tensor name that another body has too
    s_B1CC = ops.parameter(ov.PartialShape([B, 1, C, C]), et, name=f"layers.{layer}.linear_attn.state")
    q_B11C, k_B11C, v_B11C = (ops.parameter(ov.PartialShape([B, 1, 1, C]), et, name=f"layers.{layer}.linear_attn.{n}")
                              for n in ("q_t", "k_t", "v_t"))
    decay = _const(w.decay.reshape(1, 1, C, 1), et)
    s_next = ops.add(ops.multiply(s_B1CC, decay), ops.matmul(k_B11C, v_B11C, True, False))
    y_B11C = ops.matmul(q_B11C, s_next, False, False)
    body = ov.Model([ops.result(ops.constant(True)), ops.result(s_next), ops.result(y_B11C)],
                    [s_B1CC, q_B11C, k_B11C, v_B11C], f"layers.{layer}.linear_attn.body")
    trip_count = ops.gather(ops.shape_of(x_BTH, "i64"), _i64(1), _i64(0))
    loop = ops.loop(trip_count, ops.constant(True))
    loop.set_function(body)
    loop.set_special_body_ports([-1, 0])   # no iteration-number input; the condition is body output 0
    loop.set_merged_input(s_B1CC, past, s_next.output(0))
    for param, value in ((q_B11C, q_B1TC), (k_B11C, k_B1TC), (v_B11C, v_B1TC)):
        loop.set_sliced_input(param, value, 0, 1, 1, -1, 2)
    final_state = loop.get_iter_value(s_next.output(0), -1)
    y_B1TC = loop.get_concatenated_slices(y_B11C.output(0), 0, 1, 1, -1, 2)
    loop.set_friendly_name(spec.scan_name(layer))
    y_BTC = ops.reshape(y_B1TC, _i64([0, -1, C]), special_zero=True).output(0)
    assign = ops.assign(loop, var)   # the Python Assign takes a node, not an output: set its input after
    assign.input(0).replace_source_output(final_state)
    return proj(y_BTC, w.w_out), assign


def build_stack(spec: StackSpec) -> ov.Model:
    """A stateful model for ``spec``.

    Inputs: ``inputs_embeds`` [B, T, hidden], ``beam_idx`` [B] (when ``beam_gather``), and
    ``attention_mask`` [B, past + T] (for ``bool``/``float`` masks). Output: ``hidden_out``.
    """
    from openvino.op.util import Variable, VariableInfo

    et = ov.Type.f16 if spec.dtype == "f16" else ov.Type.f32
    cache_et = ov.Type.f16 if spec.cache_type == "f16" else ov.Type.f32
    np_et = np.float16 if spec.dtype == "f16" else np.float32
    B = -1 if spec.dynamic_batch else spec.batch
    H, Hkv, D, hidden = spec.heads, spec.kv_heads, spec.head_dim, spec.hidden
    bhsd = spec.layout == "BHSD"
    seq_axis = 2 if bhsd else 1
    w = stack_weights(spec)
    w_recurrent = recurrent_weights(spec)

    x_p = ops.parameter(ov.PartialShape([B, -1, hidden]), et, name="inputs_embeds")
    x_p.output(0).set_names({"inputs_embeds"})
    params = [x_p]
    beam = None
    if spec.beam_gather:
        beam = ops.parameter(ov.PartialShape([B]), ov.Type.i32, name="beam_idx")
        beam.output(0).set_names({"beam_idx"})
        params.append(beam)
    mask_node = None
    if spec.mask in ("bool", "float", "sliding"):
        am = ops.parameter(ov.PartialShape([B, -1]), ov.Type.i64, name="attention_mask")
        am.output(0).set_names({"attention_mask"})
        params.append(am)
        keep = ops.unsqueeze(ops.convert(am, ov.Type.boolean), _i64([1, 2]))
        if spec.mask == "sliding":
            pass   # built at the first layer that reads a cache: its positions come from that cache's past
        elif spec.mask == "bool":
            mask_node = keep
        else:
            mask_node = ops.convert(ops.multiply(ops.subtract(ops.convert(am, ov.Type.f32), _const(1.0, ov.Type.f32)),
                                                 _const(1e4, ov.Type.f32)), et)
            mask_node = ops.unsqueeze(mask_node, _i64([1, 2]))
    batch_dim = ops.gather(ops.shape_of(x_p, "i64"), _i64([0]), _i64(0))

    def heads_split(t: ov.Output, n_heads: int, name: str) -> ov.Output:
        r = ops.reshape(t, _i64([0, 0, n_heads, D]), special_zero=True)   # [B, T, h, D]
        r.set_friendly_name(name)
        return (ops.transpose(r, _i64([0, 2, 1, 3])) if bhsd else r).output(0)

    def to_bhsd(t: ov.Output) -> ov.Output:
        return t if bhsd else ops.transpose(t, _i64([0, 2, 1, 3])).output(0)

    sliding_masks: dict[bool, ov.Output] = {}   # windowed or not -> the mask [B, 1, T, S]

    def sliding_mask(past_BHSD: ov.Output, windowed: bool) -> ov.Output:
        if not sliding_masks:
            past = ops.gather(ops.shape_of(past_BHSD, "i64"), _i64(seq_axis), _i64(0))
            new_T = ops.gather(ops.shape_of(x_p, "i64"), _i64(1), _i64(0))
            total_S = ops.add(past, new_T)
            kv_idx_11S = ops.unsqueeze(ops.range(_i64(0), total_S, _i64(1), "i64"), _i64([0, 1]))
            q_idx_1T1 = ops.unsqueeze(ops.range(past, total_S, _i64(1), "i64"), _i64([0, 2]))
            causal = ops.less_equal(kv_idx_11S, q_idx_1T1)
            target = ops.concat([batch_dim, _i64([1]), ops.unsqueeze(new_T, _i64([0])),
                                 ops.unsqueeze(total_S, _i64([0]))], 0)
            true = ops.constant(np.ones((1, 1, 1, 1), bool))
            for with_window in (True, False):
                cond = causal
                if with_window and spec.mask_form == "bitwise":
                    in_window = ops.greater(kv_idx_11S, ops.add(q_idx_1T1, _i64([-spec.window])))
                    cond = ops.bitwise_and(causal, in_window)
                cond = ops.bitwise_and(ops.bitwise_and(true, ops.bitwise_and(cond, keep)), true)
                select = ops.select(ops.broadcast(cond, target), _const(0.0, et), _const(_mask_min(et), et))
                if with_window and spec.mask_form == "distance":
                    too_far_1TS = ops.greater_equal(ops.subtract(q_idx_1T1, kv_idx_11S), _i64([spec.window]))
                    select = ops.select(ops.unsqueeze(too_far_1TS, _i64([0])), _const(_mask_min(et), et), select)
                select.set_friendly_name("sliding_window_mask" if with_window else "causal_mask")
                sliding_masks[with_window] = select.output(0)
        return sliding_masks[windowed]

    x = x_p.output(0)
    sinks = []
    cache_out: dict[tuple[int, str], ov.Output] = {}
    owner_parts: dict[tuple[int, str], tuple[ov.Output, ov.Output]] = {}   # (ReadValue, new) of each cache
    for i in range(spec.num_layers):
        if i in spec.recurrent_layers:
            y, sink = _recurrent_block(spec, i, x, batch_dim.output(0), beam, et, w_recurrent[i])
            sinks.append(sink)
            x = ops.add(x, y).output(0)
        prefix = f"layers.{i}.self_attn"
        q = to_bhsd(heads_split(ops.matmul(x, _const(w.wq[i], et), False, False).output(0), H, f"{prefix}.q"))
        kv_in: dict[str, ov.Output] = {}
        for kind, wm in (("key", w.wk[i]), ("value", w.wv[i])):
            src = spec.sources(kind)[i]
            if src is None or src == i:
                new = heads_split(ops.matmul(x, _const(wm, et), False, False).output(0), Hkv, f"{prefix}.{kind}_new")
            if src is None:
                kv_in[kind] = new
                continue
            if src == i:
                vid = spec.variable_id(i, kind)
                shape = [B, Hkv, -1, D] if bhsd else [B, -1, Hkv, D]
                info = VariableInfo()
                info.data_shape = ov.PartialShape(shape)
                info.data_type = cache_et
                info.variable_id = vid
                var = Variable(info)
                if cache_et == et:
                    # exporters initialise the cache as zeros of [batch, heads, 0, head_dim]
                    zero_len = _i64([Hkv, 0, D] if bhsd else [0, Hkv, D])
                    init = ops.broadcast(ops.constant(np.zeros((), np.float32), dtype=cache_et),
                                         ops.concat([batch_dim, zero_len], 0))
                    rv = ops.read_value(init, var)
                else:
                    # measured on 2026.4.1: an initialiser plus a Convert on the cache path makes the CPU
                    # plugin fix the Assign's sequence dimension to 0; without one the state starts empty
                    rv = ops.read_value(var)
                rv.set_friendly_name(vid)
                past = rv.output(0)
                if cache_et != et:
                    past = ops.convert(past, et).output(0)
                if beam is not None:
                    past = ops.gather(past, beam, _i64(0)).output(0)
                cat = ops.concat([past, new], seq_axis)
                cat.set_friendly_name(f"{prefix}.{kind}_cache")
                stored = ops.convert(cat, cache_et) if cache_et != et else cat
                sinks.append(ops.assign(stored, var))
                cache_out[(i, kind)] = cat.output(0)
                owner_parts[(i, kind)] = (rv.output(0), new)
                if spec.mask == "sliding" and not sliding_masks:
                    sliding_mask(past, True)
                if kind == "key" and i in spec.past_length_from:
                    at = {"concat": cat.output(0), "gather": past, "readvalue": rv.output(0)}[spec.past_length_at]
                    cache_out[(i, "past_length")] = at
            if src != i and spec.borrow_path == "own_concat":
                rv_out, owner_new = owner_parts[(src, kind)]
                past = rv_out if cache_et == et else ops.convert(rv_out, et).output(0)
                if beam is not None:
                    past = ops.gather(past, beam, ops.constant(np.int32(0))).output(0)
                cat = ops.concat([past, owner_new], seq_axis - 4)
                cat.set_friendly_name(f"{prefix}.{kind}_borrowed_cache")
                kv_in[kind] = cat.output(0)
                continue
            kv_in[kind] = cache_out[(src, kind)]
        k = _gqa(to_bhsd(kv_in["key"]), spec, f"{prefix}.key_gqa")
        v = _gqa(to_bhsd(kv_in["value"]), spec, f"{prefix}.value_gqa")

        stateless = spec.k_source[i] is None
        if spec.scale == "prescaled":
            q = ops.multiply(q, _const(spec.scale_value, et)).output(0)
        inputs = [q, k, v]
        if spec.mask == "sliding" and not stateless:
            inputs.append(sliding_masks[i not in spec.full_layers])
        elif mask_node is not None and not stateless:
            inputs.append(mask_node)
        elif spec.scale != "none":
            inputs.append(_const(0.0, et))
        if spec.scale != "none":
            inputs.append(_const(spec.scale_value, et))
        sdpa = ops.scaled_dot_product_attention(*inputs, causal=spec.mask == "causal")
        sdpa.set_friendly_name(spec.sdpa_name(i))
        attn = ops.reshape(ops.transpose(sdpa, _i64([0, 2, 1, 3])), _i64([0, 0, hidden]), special_zero=True)
        x = ops.add(x, ops.matmul(attn, _const(w.wo[i], et), False, False)).output(0)
        if (i, "past_length") in cache_out:
            length = ops.gather(ops.shape_of(cache_out[(i, "past_length")], "i64"), _i64(seq_axis), _i64(0))
            length.set_friendly_name(f"{prefix}.past_length")
            x = ops.add(x, ops.multiply(ops.convert(length, et), _const(PAST_LENGTH_WEIGHT, et))).output(0)

    out = ops.result(x)
    out.output(0).set_names({STACK_OUTPUT})
    x.get_node().output(0).set_names({STACK_OUTPUT})
    del np_et
    model = ov.Model([out], sinks, params, "stack")
    return as_read_back(model) if spec.recurrent_form == "scan" and spec.recurrent_layers else model


def as_read_back(model: ov.Model) -> ov.Model:
    """``model`` as OpenVINO reads it back from its IR files.

    Measured on 2026.0.0 and 2026.4.1: the IR reader orders a state's ReadValue before the other inputs of the
    Loop that computes its Assign's value (as if the Assign depended on the ReadValue, which the Python API
    cannot say), where a model built in Python orders the Loop's trip count first. So the file of a scan stack
    built here is not the file its read-back writes, while a read-back writes the file it was read from, as
    every exporter's IR does; tests that compare files (idempotence through the IR) need that.
    """
    with tempfile.TemporaryDirectory() as folder:
        xml, weights = Path(folder, "model.xml"), Path(folder, "model.bin")
        ov.serialize(model, str(xml), str(weights))
        text, data = xml.read_text(), np.fromfile(weights, np.uint8)
    return ov.Core().read_model(text, ov.Tensor(data))


@dataclass(frozen=True)
class StackStep:
    inputs_embeds: np.ndarray
    attention_mask: np.ndarray
    beam_idx: np.ndarray


def stack_steps(spec: StackSpec, prefill: int = 5, decode: int = 3, seed: int = 1,
                chunk: int | None = None) -> list[StackStep]:
    """Inputs for a prefill of ``prefill`` tokens (in steps of at most ``chunk`` tokens; None: one step)
    then ``decode`` single-token steps (state carried).

    With batch > 1 the first batch row is left-padded by one position (its attention_mask starts with 0).
    """
    rng = np.random.default_rng(seed)
    np_et = np.float16 if spec.dtype == "f16" else np.float32
    steps = []
    total = 0
    chunk = chunk or prefill
    chunks = [min(chunk, prefill - start) for start in range(0, prefill, chunk)]
    for t in chunks + [1] * decode:
        total += t
        am = np.ones((spec.batch, total), np.int64)
        if spec.batch > 1:
            am[0, 0] = 0
        steps.append(StackStep(rng.standard_normal((spec.batch, t, spec.hidden)).astype(np_et), am,
                               np.arange(spec.batch, dtype=np.int32)))
    return steps


def step_feed(spec: StackSpec, step: StackStep) -> dict[str, np.ndarray]:
    feed = {"inputs_embeds": step.inputs_embeds}
    if spec.beam_gather:
        feed["beam_idx"] = step.beam_idx
    if spec.mask in ("bool", "float", "sliding"):
        feed["attention_mask"] = step.attention_mask
    return feed


def failing_check_model() -> ov.Model:
    """``x + sum(failing_check(lost))``: inputs ``lost`` (i64 [1]) and ``x`` (f32 [?]); the inference fails (a Concat
    of mismatched shapes, the bounded cache's lost-positions check) where ``lost`` is 1, else gives ``x``."""
    from ovpasses.features.sliding_window.sliding_window_cache_bounding import failing_check  # noqa: PLC0415

    lost = ops.parameter([1], ov.Type.i64, name="lost")
    x = ops.parameter([-1], ov.Type.f32, name="x")
    checked = ops.convert(ops.reduce_sum(failing_check(lost), _i64([0, 1]), False), ov.Type.f32)
    return ov.Model([ops.add(x, checked)], [lost, x])


def run_stack(compiled: ov.CompiledModel, spec: StackSpec, steps: list[StackStep],
              request: ov.InferRequest | None = None, after_step=None) -> list[np.ndarray]:
    """Run ``steps`` through one infer request (``request``, else a new one of ``compiled``) from a reset state;
    return each step's output. ``after_step()`` runs after each step (a trimmer's ``trim``)."""
    request = request or compiled.create_infer_request()
    request.reset_state()
    outs = []
    for step in steps:
        infer(request, step_feed(spec, step))
        outs.append(np.array(request.get_tensor(STACK_OUTPUT).data, copy=True))
        if after_step is not None:
            after_step()
    return outs


def stack_reference(spec: StackSpec, steps: list[StackStep]) -> list[np.ndarray]:
    """Float64 forward of :func:`build_stack` from the operation specifications, caches carried."""
    w = stack_weights(spec)
    H, Hkv, D = spec.heads, spec.kv_heads, spec.head_dim

    def rnd(x: np.ndarray, kind: str) -> np.ndarray:
        return x.astype(np.float16).astype(np.float64) if kind == "f16" else x.astype(np.float32).astype(np.float64)

    if spec.dtype == "f16":
        w = StackWeights(*[[rnd(m, "f16") for m in ms] for ms in (w.wq, w.wk, w.wv, w.wo)])
    else:
        w = StackWeights(*[[rnd(m, "f32") for m in ms] for ms in (w.wq, w.wk, w.wv, w.wo)])
    w_recurrent = {i: rw.rounded(spec.dtype) for i, rw in recurrent_weights(spec).items()}
    caches: dict[tuple[int, str], np.ndarray] = {}
    states: dict[int, np.ndarray] = {}
    outs = []
    for step in steps:
        x = np.asarray(step.inputs_embeds, np.float64)
        Bsz, T, _ = x.shape
        cats: dict[tuple[int, str], np.ndarray] = {}
        for i in range(spec.num_layers):
            if i in spec.recurrent_layers:
                y, state = _recurrent_reference(spec, x, states.get(i), step.beam_idx, w_recurrent[i])
                states[i] = rnd(state, spec.dtype)   # the state variable has the model's element type
                x = x + y
            q = (x @ w.wq[i]).reshape(Bsz, T, H, D).transpose(0, 2, 1, 3)
            kv = {}
            past_len = None
            for kind, wm in (("key", w.wk[i]), ("value", w.wv[i])):
                src = spec.sources(kind)[i]
                if src is None or src == i:
                    new = (x @ wm).reshape(Bsz, T, Hkv, D).transpose(0, 2, 1, 3)
                if src is None:
                    kv[kind] = new
                    continue
                if src == i:
                    past = caches.get((i, kind), np.zeros((Bsz, Hkv, 0, D)))
                    past = past[step.beam_idx] if spec.beam_gather else past
                    cats[(i, kind)] = np.concatenate([past, new], axis=2)
                    caches[(i, kind)] = rnd(cats[(i, kind)], spec.cache_type)
                    if kind == "key" and i in spec.past_length_from:
                        past_len = past.shape[2] + (T if spec.past_length_at == "concat" else 0)
                kv[kind] = cats[(src, kind)]
            rep = H // Hkv
            k, v = np.repeat(kv["key"], rep, axis=1), np.repeat(kv["value"], rep, axis=1)
            stateless = spec.k_source[i] is None
            mask = None
            if spec.mask == "sliding" and not stateless:
                S = step.attention_mask.shape[1]
                kv_idx, q_idx = np.arange(S)[None, :], np.arange(S - T, S)[:, None]
                seen = (kv_idx <= q_idx) & ((kv_idx > q_idx - spec.window) | (i in spec.full_layers))
                seen = seen[None, None] & step.attention_mask[:, None, None, :].astype(bool)
                mask = np.where(seen, 0.0, MASK_MIN)
            elif spec.mask in ("bool", "float") and not stateless:
                am = step.attention_mask[:, None, None, :]
                mask = am.astype(bool) if spec.mask == "bool" else (am.astype(np.float64) - 1.0) * 1e4
            elif spec.scale != "none":
                mask = np.float64(0.0)
            scale = None
            if spec.scale != "none":
                scale = rnd(np.float64(spec.scale_value), spec.dtype)
                if spec.scale == "prescaled":
                    q = q * scale
            attn = sdpa_reference(q, k, v, mask, scale, causal=spec.mask == "causal")
            x = x + attn.transpose(0, 2, 1, 3).reshape(Bsz, T, spec.hidden) @ w.wo[i]
            if past_len is not None:
                x = x + past_len * PAST_LENGTH_WEIGHT
        outs.append(x)
    return outs


def _recurrent_reference(spec: StackSpec, x_BTH: np.ndarray, past: np.ndarray | None, beam_idx: np.ndarray,
                         w: RecurrentWeights) -> tuple[np.ndarray, np.ndarray]:
    """Float64 output [B, T, hidden] and new state of one recurrent block of :class:`StackSpec`, from the
    specifications of GroupConvolution-1 (a cross-correlation: no kernel flip) and of Loop-5 (the body run
    once per token, its state carried)."""
    Bsz, T, _ = x_BTH.shape
    C, K = spec.hidden, CONV_KERNEL
    if spec.recurrent_form == "conv":
        past = np.zeros((Bsz, C, K - 1)) if past is None else past
        past = past[beam_idx] if spec.beam_gather else past
        cat_BCS = np.concatenate([past, (x_BTH @ w.w_in).transpose(0, 2, 1)], axis=2)
        conv_BCT = np.stack([(cat_BCS[:, :, t:t + K] * w.kernel).sum(-1) for t in range(T)], axis=2)
        return conv_BCT.transpose(0, 2, 1) @ w.w_out, cat_BCS[:, :, -(K - 1):]
    s_BCC = np.zeros((Bsz, C, C)) if past is None else past[:, 0]
    s_BCC = s_BCC[beam_idx] if spec.beam_gather else s_BCC
    def l2_normalised(t: np.ndarray) -> np.ndarray:   # NormalizeL2-0, eps_mode "add"
        return t / np.sqrt((t * t).sum(-1, keepdims=True) + SCAN_L2_EPS)

    q_BTC, k_BTC, v_BTC = l2_normalised(x_BTH @ w.wq), l2_normalised(x_BTH @ w.wk), x_BTH @ w.wv
    ys = []
    for t in range(T):
        s_BCC = s_BCC * w.decay[:, None] + k_BTC[:, t, :, None] * v_BTC[:, t, None, :]
        ys.append(np.einsum("bc,bcd->bd", q_BTC[:, t], s_BCC))
    return np.stack(ys, axis=1) @ w.w_out, s_BCC[:, None]


# --------------------------------------------------------------------------------------------------
# A KV cache that a sub-graph operation also reads
# --------------------------------------------------------------------------------------------------

LoopReads = Literal["concat", "past", "readvalue", "variable"]

LOOP_SDPA = StackSpec.sdpa_name(0)
LOOP_NAME = "cache_loop"
LOOP_ATTENTION_OUTPUT = "attention"
LOOP_SUMMARY_OUTPUT = "cache_summary"


@dataclass(frozen=True)
class CacheLoopSpec:
    """One stateful attention layer whose K cache a Loop also reads: the smallest graph in which a cache
    has a reader that the KV-sharing analysis cannot see into (the Loop's body)::

        ReadValue(k) -> Gather(beam_idx) -> Concat(past, k_new) -> Assign(k)
             |                 |                 |
             |                 |                 +--> SDPA(q, K, V) -> attention    (V: the same path
             |                 |                 |                                  with its own cache)
             +-("readvalue")---+-("past")--------+-("concat")--> Loop(trip_count) -> cache_summary
                                                    body: acc_1H1D += ReduceSum(cache_1HSD, axis 2)

    ``loop_reads`` is the node of the K cache path that the Loop takes as its invariant input: the
    cache Concat that feeds the Assign (``"concat"``, as the SDPA reads it), the Gather(beam_idx)
    output (``"past"``) or the ReadValue's output (``"readvalue"``), the last two off the Assign's
    path. ``"variable"`` gives the Loop no input from the cache: its body reads the K variable with a
    ReadValue of its own. That form is for the analysis only: the CPU plugin does not compile a
    ReadValue of a dynamic shape without an initialiser (measured on 2026.4.1), so it has no reference.

    Batch 1; the inputs ``q``, ``k_new`` and ``v_new`` are [1, heads, T, head_dim] in f32, and
    ``beam_idx`` [1] (the Gather makes the form the CPU plugin's stateful fusion matches: without the
    Loop it fuses the SDPA, measured on 2026.0.0 and 2026.4.1). ``cache_summary`` is
    ``trip_count * (sum over S of what the Loop reads)``.
    """

    heads: int = 2
    head_dim: int = 4
    trip_count: int = 2
    loop_reads: LoopReads = "concat"

    @staticmethod
    def variable_id(kind: str) -> str:
        return StackSpec.variable_id(0, kind)


def build_cache_loop(spec: CacheLoopSpec) -> ov.Model:
    """The model of ``spec``: outputs ``attention`` [1, H, T, D] and ``cache_summary`` [1, H, 1, D]."""
    from openvino.op.util import Variable, VariableInfo

    H, D = spec.heads, spec.head_dim
    f32 = ov.Type.f32
    inputs = {name: _param(name, [1, H, -1, D], (2,), f32) for name in ("q", "k_new", "v_new")}
    inputs["beam_idx"] = _param("beam_idx", [1], (), ov.Type.i32)
    variables: dict[str, Variable] = {}
    k_path: dict[str, ov.Output] = {}        # the nodes of the K cache path the Loop can read
    caches: dict[str, ov.Output] = {}
    sinks = []
    for kind, new in (("key", inputs["k_new"]), ("value", inputs["v_new"])):
        info = VariableInfo()
        info.data_shape = ov.PartialShape([1, H, -1, D])
        info.data_type = f32
        info.variable_id = spec.variable_id(kind)
        variables[kind] = Variable(info)
        empty_1H0D = ops.broadcast(_const(0.0, f32), _i64([1, H, 0, D]))
        rv = ops.read_value(empty_1H0D, variables[kind])
        rv.set_friendly_name(spec.variable_id(kind))
        past_1HSD = ops.gather(rv, inputs["beam_idx"], _i64(0))
        cache_1HSD = ops.concat([past_1HSD, new], 2)
        cache_1HSD.set_friendly_name(f"layers.0.self_attn.{kind}_cache")
        sinks.append(ops.assign(cache_1HSD, variables[kind]))
        caches[kind] = cache_1HSD.output(0)
        if kind == "key":
            k_path = {"readvalue": rv.output(0), "past": past_1HSD.output(0), "concat": cache_1HSD.output(0)}

    sdpa = ops.scaled_dot_product_attention(inputs["q"], caches["key"], caches["value"], causal=False)
    sdpa.set_friendly_name(LOOP_SDPA)

    body_acc_1H1D = ops.parameter(ov.PartialShape([1, H, 1, D]), f32, name="body_acc")
    if spec.loop_reads == "variable":
        body_params = [body_acc_1H1D]
        body_cache_1HSD = ops.read_value(variables["key"])
    else:
        body_cache_1HSD = ops.parameter(ov.PartialShape([1, H, -1, D]), f32, name="body_cache")
        body_params = [body_cache_1HSD, body_acc_1H1D]
    acc_next = ops.add(body_acc_1H1D, ops.reduce_sum(body_cache_1HSD, _i64([2]), keep_dims=True))
    body = ov.Model([ops.result(ops.constant(True)), ops.result(acc_next)], body_params, "cache_loop_body")
    loop = ops.loop(ops.constant(np.int64(spec.trip_count)), ops.constant(True))
    loop.set_function(body)
    loop.set_special_body_ports([-1, 0])   # no iteration-number input; the condition is body output 0
    if spec.loop_reads != "variable":
        loop.set_invariant_input(body_cache_1HSD, k_path[spec.loop_reads])
    loop.set_merged_input(body_acc_1H1D, ops.constant(np.zeros((1, H, 1, D), np.float32)).output(0),
                          acc_next.output(0))
    summary = loop.get_iter_value(acc_next.output(0), -1)
    loop.set_friendly_name(LOOP_NAME)

    results = []
    for name, output in ((LOOP_ATTENTION_OUTPUT, sdpa.output(0)), (LOOP_SUMMARY_OUTPUT, summary)):
        output.set_names({name})
        result = ops.result(output)
        result.output(0).set_names({name})
        results.append(result)
    return ov.Model(results, sinks, list(inputs.values()), "cache_loop")


def cache_loop_steps(spec: CacheLoopSpec, prefill: int = 3, decode: int = 2,
                     seed: int = 1) -> list[dict[str, np.ndarray]]:
    """Inputs of a prefill of ``prefill`` tokens then ``decode`` single-token steps (state carried)."""
    rng = np.random.default_rng(seed)
    steps = []
    for t in [prefill] + [1] * decode:
        feed = {name: rng.standard_normal((1, spec.heads, t, spec.head_dim)).astype(np.float32)
                for name in ("q", "k_new", "v_new")}
        feed["beam_idx"] = np.zeros(1, np.int32)
        steps.append(feed)
    return steps


def run_cache_loop(compiled: ov.CompiledModel, steps: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """Run ``steps`` through one infer request from a reset state; both outputs of each step."""
    request = compiled.create_infer_request()
    request.reset_state()
    outs = []
    for feed in steps:
        request.infer(feed)
        outs.append({name: np.array(request.get_tensor(name).data, copy=True)
                     for name in (LOOP_ATTENTION_OUTPUT, LOOP_SUMMARY_OUTPUT)})
    return outs


def cache_loop_reference(spec: CacheLoopSpec, steps: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """Float64 outputs of :func:`build_cache_loop` for ``steps``, from the operation specifications."""
    if spec.loop_reads == "variable":
        raise ValueError("loop_reads='variable' is a graph for the analysis only; it has no reference")
    shape = (1, spec.heads, 0, spec.head_dim)
    past_k, past_v = np.zeros(shape), np.zeros(shape)
    outs = []
    for feed in steps:
        past_k, past_v = past_k[feed["beam_idx"]], past_v[feed["beam_idx"]]
        k = np.concatenate([past_k, np.asarray(feed["k_new"], np.float64)], axis=2)
        v = np.concatenate([past_v, np.asarray(feed["v_new"], np.float64)], axis=2)
        read = k if spec.loop_reads == "concat" else past_k
        outs.append({LOOP_ATTENTION_OUTPUT: sdpa_reference(feed["q"], k, v),
                     LOOP_SUMMARY_OUTPUT: spec.trip_count * read.sum(axis=2, keepdims=True)})
        past_k, past_v = k, v
    return outs


# --------------------------------------------------------------------------------------------------
# A decoder stack the PagedAttention converter accepts, with a head layout per layer
# --------------------------------------------------------------------------------------------------

HEADS_STACK_OUTPUT = "logits"


@dataclass(frozen=True)
class HeadsStackSpec:
    """A stateful decoder that openvino_genai's PagedAttention conversion accepts (inputs ``input_ids``,
    ``attention_mask``, ``position_ids``, ``beam_idx``), one attention layer per entry of ``layers``:
    ``(query heads H, KV heads Hkv, head size D)``. No KV sharing, no sliding window, scale 1; what it
    varies is the head layout from layer to layer, which the CPU PagedAttention of some releases mixes
    up. Each layer owns its cache::

        x = embedding[input_ids] + 0.01 * position_ids
        q_BHLD = x @ Wq;  k_new_BHkvLD = x @ Wk;  v_new_BHkvLD = x @ Wv
        k_BHkvSD = Concat(Gather(ReadValue, beam_idx), k_new) -> Assign;  (V the same)
        K/V expanded to H heads (Unsqueeze -> Broadcast -> Reshape) when Hkv < H
        x = x + SDPA(q, k, v, causal mask from position_ids, scale 1) @ Wo

    The output (``logits``) is the last ``x``. Two layouts of the Gemma 4 family, as data:

    * ``kv_source[i] = j < i``: layer i writes no cache and reads layer j's (a KV-shared borrower, as
      Gemma 4 E2B/E4B's last layers; layer j's ``(Hkv, D)``; its own query heads);
    * ``i in k_eq_v``: one projection feeds both of layer i's caches (``v_new_BHkvLD = k_new_BHkvLD``;
      Gemma 4 26B/31B's full layers take V from the raw k_proj output).
    """

    layers: tuple[tuple[int, int, int], ...] = ((4, 2, 16), (4, 2, 32))
    hidden: int = 32
    vocab: int = 64
    seed: int = 0
    kv_source: tuple[int, ...] | None = None
    k_eq_v: tuple[int, ...] = ()
    scale: float | None = 1.0   # None: the SDPA has no scale input (the specification's 1/sqrt(D))

    @property
    def sources(self) -> tuple[int, ...]:
        return tuple(range(len(self.layers))) if self.kv_source is None else self.kv_source

    def __post_init__(self) -> None:
        for i, (heads, kv_heads, head) in enumerate(self.layers):
            if heads % kv_heads:
                raise ValueError(f"layer {i}: {heads} query heads are not a multiple of {kv_heads} KV heads")
        if len(self.sources) != len(self.layers):
            raise ValueError("kv_source needs one entry per layer")
        for i, j in enumerate(self.sources):
            if not 0 <= j <= i or self.sources[j] != j or self.layers[j][1:] != self.layers[i][1:] \
                    or self.layers[i][0] % self.layers[j][1]:
                raise ValueError(f"layer {i} cannot read layer {j}'s cache (an owner at or before it, with its "
                                 "KV heads and head size)")


def heads_stack_weights(spec: HeadsStackSpec) -> tuple[np.ndarray, list[tuple[np.ndarray, ...]]]:
    """(embedding, per layer (Wq, Wk, Wv, Wo)), float32."""
    rng = np.random.default_rng(spec.seed)
    emb = rng.standard_normal((spec.vocab, spec.hidden)).astype(np.float32)
    layers = []
    for heads, kv_heads, head in spec.layers:
        shapes = ((spec.hidden, heads * head), (spec.hidden, kv_heads * head), (spec.hidden, kv_heads * head),
                  (heads * head, spec.hidden))
        layers.append(tuple((0.3 * rng.standard_normal(s)).astype(np.float32) for s in shapes))
    return emb, layers


def build_heads_stack(spec: HeadsStackSpec) -> ov.Model:
    """The stateful model of ``spec`` (see :class:`HeadsStackSpec`)."""
    from openvino.op.util import Variable, VariableInfo

    emb, weights = heads_stack_weights(spec)
    params = {}
    for name, shape, et in (("input_ids", [-1, -1], ov.Type.i64), ("attention_mask", [-1, -1], ov.Type.i64),
                            ("position_ids", [-1, -1], ov.Type.i64), ("beam_idx", [-1], ov.Type.i32)):
        params[name] = ops.parameter(shape, et, name=name)
        params[name].output(0).set_names({name})
    batch = ops.gather(ops.shape_of(params["input_ids"]), _i64([0]), _i64(0))
    x = ops.gather(ops.constant(emb), params["input_ids"], _i64(0))
    position = ops.convert(params["position_ids"], ov.Type.f32)
    x = ops.add(x, ops.unsqueeze(ops.multiply(position, _const(0.01, ov.Type.f32)), _i64(2)))
    # causal mask [B, 1, L, S]: key j is seen from the query at position p when j <= p
    total = ops.gather(ops.shape_of(params["attention_mask"]), _i64([1]), _i64(0))
    key_pos_1S = ops.range(_i64(0), ops.squeeze(total, _i64(0)), _i64(1), "i64")
    seen = ops.less_equal(ops.unsqueeze(key_pos_1S, _i64([0, 1, 2])),
                          ops.unsqueeze(params["position_ids"], _i64([1, 3])))
    mask = ops.select(seen, _const(0.0, ov.Type.f32), _const(-np.inf, ov.Type.f32))
    sinks, caches = [], {}
    for i, ((heads, kv_heads, head), (wq, wk, wv, wo)) in enumerate(zip(spec.layers, weights)):
        def split(t: ov.Node, n: int) -> ov.Node:
            return ops.transpose(ops.reshape(t, _i64([0, 0, n, head]), special_zero=True), _i64([0, 2, 1, 3]))

        q_BHLD = split(ops.matmul(x, ops.constant(wq), False, False), heads)
        if spec.sources[i] != i:   # a borrower: the owner's caches
            kv = [_heads_expand(cache_BHkvSD, batch, kv_heads, heads, head) for cache_BHkvSD in caches[spec.sources[i]]]
        else:
            kv = []
            k_new_BHkvLD = split(ops.matmul(x, ops.constant(wk), False, False), kv_heads)
        for kind, w in (() if spec.sources[i] != i else (("key", wk), ("value", wv))):
            new_BHkvLD = (k_new_BHkvLD if kind == "key" or i in spec.k_eq_v else
                          split(ops.matmul(x, ops.constant(w), False, False), kv_heads))
            info = VariableInfo()
            info.data_shape = ov.PartialShape([-1, kv_heads, -1, head])
            info.data_type = ov.Type.f32
            info.variable_id = f"past_key_values.{i}.{kind}present.{i}.{kind}"
            variable = Variable(info)
            init = ops.broadcast(_const(0.0, ov.Type.f32), ops.concat([batch, _i64([kv_heads, 0, head])], 0))
            cache_BHkvSD = ops.concat([ops.gather(ops.read_value(init, variable), params["beam_idx"], _i64(0)),
                                       new_BHkvLD], 2)
            sinks.append(ops.assign(cache_BHkvSD, variable))
            caches.setdefault(i, []).append(cache_BHkvSD)
            kv.append(_heads_expand(cache_BHkvSD, batch, kv_heads, heads, head))
        scale = () if spec.scale is None else (_const(spec.scale, ov.Type.f32),)
        attention = ops.scaled_dot_product_attention(q_BHLD, kv[0], kv[1], mask, *scale, causal=False)
        attention.set_friendly_name(f"layers.{i}.self_attn.sdpa")
        merged = ops.reshape(ops.transpose(attention, _i64([0, 2, 1, 3])), _i64([0, 0, heads * head]), special_zero=True)
        x = ops.add(x, ops.matmul(merged, ops.constant(wo), False, False))
    result = ops.result(x)
    result.output(0).set_names({HEADS_STACK_OUTPUT})
    return ov.Model([result], sinks, list(params.values()), "heads_stack")


def run_heads_stack(compiled: ov.CompiledModel, tokens: list[int], prefill: int) -> np.ndarray:
    """Outputs of a compiled stateful :func:`build_heads_stack` model for ``tokens``: a prefill of the first
    ``prefill``, then one token at a time; one row per token (as :func:`heads_stack_reference`)."""
    request = compiled.create_infer_request()
    rows, past = [], 0
    for chunk in [tokens[:prefill]] + [[t] for t in tokens[prefill:]]:
        total = past + len(chunk)
        request.infer({"input_ids": np.array([chunk], np.int64), "attention_mask": np.ones((1, total), np.int64),
                       "position_ids": np.arange(past, total, dtype=np.int64)[None],
                       "beam_idx": np.zeros(1, np.int32)})
        rows.append(np.array(request.get_output_tensor(0).data[0], copy=True))
        past = total
    return np.concatenate(rows)


def _heads_expand(cache_BHkvSD: ov.Node, batch: ov.Node, kv_heads: int, heads: int, head: int) -> ov.Node:
    """[B, Hkv, S, D] -> [B, H, S, D] as the exporters write GQA (Unsqueeze -> Broadcast -> Reshape); as is when Hkv = H."""
    if kv_heads == heads:
        return cache_BHkvSD
    length = ops.gather(ops.shape_of(cache_BHkvSD), _i64([2]), _i64(0))
    expanded = ops.broadcast(ops.unsqueeze(cache_BHkvSD, _i64(2)),
                             ops.concat([batch, _i64([kv_heads, heads // kv_heads]), length, _i64([head])], 0))
    return ops.reshape(expanded, ops.concat([batch, _i64([heads]), length, _i64([head])], 0), False)


def heads_stack_reference(spec: HeadsStackSpec, tokens: list[int]) -> np.ndarray:
    """Float64 output [len(tokens), hidden] of :func:`build_heads_stack` for one sequence, from the
    operation specifications (every position of the sequence, as a prefill of all of it computes it)."""
    emb, weights = heads_stack_weights(spec)
    n = len(tokens)
    x = emb[tokens].astype(np.float64) + 0.01 * np.arange(n)[:, None]
    kv = {}
    for i, ((heads, kv_heads, head), (wq, wk, wv, wo)) in enumerate(zip(spec.layers, weights)):
        q = (x @ wq).reshape(n, heads, head).transpose(1, 0, 2)
        if spec.sources[i] == i:
            k = (x @ wk).reshape(n, kv_heads, head).transpose(1, 0, 2)
            v = k if i in spec.k_eq_v else (x @ wv).reshape(n, kv_heads, head).transpose(1, 0, 2)
            kv[i] = k, v
        k, v = kv[spec.sources[i]]
        rep = heads // kv_heads
        attention = sdpa_reference(q, np.repeat(k, rep, axis=0), np.repeat(v, rep, axis=0), causal=True,
                                   scale=spec.scale)
        x = x + attention.transpose(1, 0, 2).reshape(n, heads * head) @ wo
    return x


def heads_stack_greedy(spec: HeadsStackSpec, prompt: list[int], steps: int) -> tuple[list[int], float]:
    """Greedy tokens of :func:`build_heads_stack` (its output read as logits over ``hidden`` tokens) after
    ``prompt``, from :func:`heads_stack_reference`, and the smallest top-1/top-2 margin on the way."""
    ids, margin = list(prompt), np.inf
    for _ in range(steps):
        row = heads_stack_reference(spec, ids)[-1]
        top = np.sort(row)[-2:]
        margin = min(margin, float(top[1] - top[0]))
        ids.append(int(row.argmax()))
    return ids[len(prompt):], margin


# --------------------------------------------------------------------------------------------------
# Layers of different attention kinds sharing caches: the graphs the sharing lint judges
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LayerKindsSpec:
    """A stateful stack whose layers differ in attention kind (sliding window or full, head size), with a
    KV-sharing layout given as data: the exports that :mod:`ovpasses.analysis.sharing_lint` judges,
    correct ones and each defect it reports. Gemma 3n and Gemma 4 alternate sliding-window and full
    layers of different head sizes; a borrower must read a cache of its own kind::

        attention_mask -> causal_BTS [& Greater(kv_pos, Add(q_pos, -window))] -> mask of each kind
        layer i: q_BHTD(head_dims[src]) ; K/V: layer k_source[i]'s / v_source[i]'s cache
                 ReadValue(v) -> Gather(beam_idx) -> Concat(past, new) -> Assign(v)   (no Assign: ``unwritten``)
                 SDPA(q, K, V, mask of window[i]) -> o_proj -> + residual

    ``window[i]`` is layer i's sliding window (None: full causal attention); each window's mask is built
    once and shared by the layers of that window, as exporters do. ``head_dims[i]`` is the head size of
    layer i's own K/V projections; a layer's Q takes the head size of the cache it reads K from, and its
    output the head size of the cache it reads V from. ``k_source``/``v_source`` are as in
    :class:`StackSpec` (``v_source`` None: as ``k_source``); every layer reads a cache. ``unwritten``
    lists owner layers whose caches no Assign writes.

    For the analysis only: several of these graphs are defects one would not run, so it has no
    reference.
    """

    k_source: tuple[int, ...] = (0, 1, 0, 1)
    v_source: tuple[int, ...] | None = None
    window: tuple[int | None, ...] | None = None     # default: even layers sliding 4, odd layers full
    head_dims: tuple[int, ...] | None = None          # default: 4 on sliding layers, 8 on full layers
    unwritten: tuple[int, ...] = ()
    heads: int = 2
    hidden: int = 16

    @property
    def num_layers(self) -> int:
        return len(self.k_source)

    @property
    def windows(self) -> tuple[int | None, ...]:
        return self.window if self.window is not None else tuple(4 if i % 2 == 0 else None
                                                                 for i in range(self.num_layers))

    @property
    def heads_dims(self) -> tuple[int, ...]:
        return self.head_dims if self.head_dims is not None else tuple(4 if w is not None else 8 for w in self.windows)

    @property
    def v_sources(self) -> tuple[int, ...]:
        return self.k_source if self.v_source is None else self.v_source

    def __post_init__(self) -> None:
        n = self.num_layers
        if len(self.v_sources) != n or len(self.windows) != n or len(self.heads_dims) != n:
            raise ValueError("k_source, v_source, window and head_dims need one entry per layer")
        for kind, sources in (("K", self.k_source), ("V", self.v_sources)):
            for i, src in enumerate(sources):
                if src is None or not 0 <= src <= i or sources[src] != src:
                    raise ValueError(f"layer {i} reads its {kind} from layer {src}, which owns no {kind} cache "
                                     "at or before it")


def build_layer_kinds(spec: LayerKindsSpec) -> ov.Model:
    """The model of ``spec``. Inputs ``inputs_embeds`` [B, T, hidden], ``attention_mask`` [B, past + T],
    ``beam_idx`` [B]; output ``hidden_out``. SDPA and variable names as :class:`StackSpec` gives them."""
    from openvino.op.util import Variable, VariableInfo

    f32 = ov.Type.f32
    rng = np.random.default_rng(0)
    H, hidden = spec.heads, spec.hidden
    x_p = _param("inputs_embeds", [-1, -1, hidden], (0, 1), f32)
    am_p = _param("attention_mask", [-1, -1], (0, 1), ov.Type.i64)
    beam = _param("beam_idx", [-1], (0,), ov.Type.i32)

    # positions: kv_pos [0, S), q_pos [S - T, S)
    total_S = ops.gather(ops.shape_of(am_p, "i64"), _i64(1), _i64(0))
    new_T = ops.gather(ops.shape_of(x_p, "i64"), _i64(1), _i64(0))
    kv_pos_11S = ops.unsqueeze(ops.range(_i64(0), total_S, _i64(1), "i64"), _i64([0, 1]))
    q_pos_1T1 = ops.unsqueeze(ops.range(ops.subtract(total_S, new_T), total_S, _i64(1), "i64"), _i64([0, 2]))
    padding_B11S = ops.unsqueeze(ops.convert(am_p, ov.Type.boolean), _i64([1, 2]))
    causal_1TS = ops.less_equal(kv_pos_11S, q_pos_1T1)
    masks: dict[int | None, ov.Output] = {}
    for window in dict.fromkeys(spec.windows):
        keep = causal_1TS
        if window is not None:
            keep = ops.logical_and(keep, ops.greater(kv_pos_11S, ops.add(q_pos_1T1, _i64(-window))))
        masks[window] = ops.logical_and(padding_B11S, keep).output(0)    # [B, 1, T, S]

    def proj(x: ov.Output, cols: int) -> ov.Output:
        return ops.matmul(x, _const(rng.standard_normal((hidden, cols)) / np.sqrt(hidden), f32), False, False).output(0)

    def heads_BHTD(t: ov.Output, d: int) -> ov.Output:
        return ops.transpose(ops.reshape(t, _i64([0, 0, H, d]), special_zero=True), _i64([0, 2, 1, 3])).output(0)

    x = x_p.output(0)
    sinks, caches = [], {}
    for i in range(spec.num_layers):
        for kind in ("key", "value"):
            if (spec.k_source if kind == "key" else spec.v_sources)[i] != i:
                continue
            d = spec.heads_dims[i]
            info = VariableInfo()
            info.data_shape = ov.PartialShape([-1, H, -1, d])
            info.data_type = f32
            info.variable_id = StackSpec.variable_id(i, kind)
            var = Variable(info)
            batch = ops.gather(ops.shape_of(x_p, "i64"), _i64([0]), _i64(0))
            rv = ops.read_value(ops.broadcast(_const(0.0, f32), ops.concat([batch, _i64([H, 0, d])], 0)), var)
            rv.set_friendly_name(info.variable_id)
            past_BHSD = ops.gather(rv, beam, _i64(0))
            cache_BHSD = ops.concat([past_BHSD, heads_BHTD(proj(x, H * d), d)], 2)
            cache_BHSD.set_friendly_name(f"layers.{i}.self_attn.{kind}_cache")
            if i not in spec.unwritten:
                sinks.append(ops.assign(cache_BHSD, var))
            caches[(i, kind)] = cache_BHSD.output(0)
        dq, dv = spec.heads_dims[spec.k_source[i]], spec.heads_dims[spec.v_sources[i]]
        q_BHTD = heads_BHTD(proj(x, H * dq), dq)
        sdpa = ops.scaled_dot_product_attention(q_BHTD, caches[(spec.k_source[i], "key")],
                                                caches[(spec.v_sources[i], "value")], masks[spec.windows[i]],
                                                causal=False)
        sdpa.set_friendly_name(StackSpec.sdpa_name(i))
        attn = ops.reshape(ops.transpose(sdpa, _i64([0, 2, 1, 3])), _i64([0, 0, H * dv]), special_zero=True)
        o_proj = _const(rng.standard_normal((H * dv, hidden)) / np.sqrt(H * dv), f32)
        x = ops.add(x, ops.matmul(attn, o_proj, False, False)).output(0)
    out = ops.result(x)
    out.output(0).set_names({STACK_OUTPUT})
    return ov.Model([out], sinks, [x_p, am_p, beam], "layer_kinds")


# ---------------------------------------------------------------- operations older runtimes cannot read

ErfInvSource = Literal["none", "constant", "f16_constant", "parameter"]
OneHotMode = Literal["none", "ignore_negative", "normalize"]


@dataclass(frozen=True)
class NewerOpsSpec:
    """A small model with operations newer than some supported runtimes read.

    Output ``erfinv``: ``x + ErfInv(c)`` with ``c`` the Constant ``erfinv_values`` (``constant``; through
    a Convert from f16 with ``f16_constant``, as ``save_model(compress_to_fp16=True)`` writes it), or
    ``ErfInv(x)`` (``parameter``). With ``in_loop_body`` that output is computed in the body of a Loop of
    one iteration. Output ``one_hot``: OneHot-16 of input ``indices`` (i64 [n]) in the mode given, with
    ``depth`` 4, ``on`` 1.5, ``off`` -2 (f32), at ``axis``.
    """

    erfinv: ErfInvSource = "constant"
    erfinv_values: tuple[float, ...] = (0.9, -0.5, 0.0, 0.999, -1.0, 1.0, 1.5)
    dtype: Literal["f32", "f16", "f64"] = "f32"
    in_loop_body: bool = False
    one_hot: OneHotMode = "none"
    indices: int = 6
    axis: int = -1

    def with_(self, **changes) -> NewerOpsSpec:
        return replace(self, **changes)


ONE_HOT_DEPTH, ONE_HOT_ON, ONE_HOT_OFF = 4, 1.5, -2.0


def build_newer_ops(spec: NewerOpsSpec) -> ov.Model:
    from openvino import opset5, opset16, opset17  # noqa: PLC0415 - absent before 2026.2

    et = {"f32": ov.Type.f32, "f16": ov.Type.f16, "f64": ov.Type.f64}[spec.dtype]
    n = len(spec.erfinv_values)
    results, params = [], []

    def erfinv_of(x: ov.Output) -> ov.Output:
        if spec.erfinv == "parameter":
            node = opset17.erfinv(x)
            node.set_friendly_name("erfinv")
            return node.output(0)
        values = np.array(spec.erfinv_values, et.to_dtype())
        if spec.erfinv == "f16_constant":
            source = ops.convert(ops.constant(values.astype(np.float16)), et)
        else:
            source = ops.constant(values)
        node = opset17.erfinv(source)
        node.set_friendly_name("erfinv")
        return ops.add(x, node).output(0)

    if spec.erfinv != "none":
        x = ops.parameter([n], et, name="x")
        params.append(x)
        if spec.in_loop_body:
            body_x = ops.parameter([n], et, name="body_x")
            body_out = erfinv_of(body_x.output(0))
            body = ov.Model([ops.constant(True).output(0), body_out], [body_x], "body")
            loop = opset5.loop(ops.constant(np.int64(1)), ops.constant(True))
            loop.set_friendly_name("loop")
            loop.set_function(body)
            loop.set_special_body_ports([-1, 0])
            loop.set_invariant_input(body_x, x.output(0))
            out = loop.get_iter_value(body_out, -1)
        else:
            out = erfinv_of(x.output(0))
        result = ops.result(out)
        result.output(0).get_tensor().set_names({"erfinv"})
        results.append(result)
    if spec.one_hot != "none":
        indices = ops.parameter([spec.indices], ov.Type.i64, name="indices")
        params.append(indices)
        node = opset16.one_hot(indices, ops.constant(np.int64(ONE_HOT_DEPTH)), ops.constant(np.float32(ONE_HOT_ON)),
                               ops.constant(np.float32(ONE_HOT_OFF)), spec.axis, spec.one_hot)
        node.set_friendly_name("one_hot")
        result = ops.result(node)
        result.output(0).get_tensor().set_names({"one_hot"})
        results.append(result)
    return ov.Model(results, params, "newer_ops")


def build_erfinv_of_a_converted_constant(constant_type: ov.Type, erfinv_type: ov.Type) -> ov.Model:
    """``Convert(ErfInv(Convert(Constant [0.5, -0.25])))``: the Constant of ``constant_type``, the ErfInv
    (named ``erfinv``) of ``erfinv_type``, the output f32. The types ErfInvConstantFolding refuses (a bf16
    ErfInv, an integer Constant) are what it is for."""
    from openvino import opset17  # noqa: PLC0415 - absent before 2026.2

    values = np.array([0.5, -0.25], constant_type.to_dtype())
    node = opset17.erfinv(ops.convert(ops.constant(values, constant_type), erfinv_type))
    node.set_friendly_name("erfinv")
    return ov.Model([ops.convert(node, ov.Type.f32)], [], "erfinv_of_a_converted_constant")


def build_erfinv_in_if_body() -> ov.Model:
    """``If(cond, x)`` (named ``if``): the then body ``x + ErfInv(Constant [0.5, -0.25])`` (the ErfInv named
    ``erfinv``), the else body ``-x``; ``x`` f32 [2], output ``y``."""
    from openvino import opset8, opset17  # noqa: PLC0415 - absent before 2026.2

    cond, x = ops.parameter([], ov.Type.boolean, name="cond"), ops.parameter([2], ov.Type.f32, name="x")
    then_x, else_x = ops.parameter([2], ov.Type.f32), ops.parameter([2], ov.Type.f32)
    erfinv_node = opset17.erfinv(ops.constant(np.array([0.5, -0.25], np.float32)))
    erfinv_node.set_friendly_name("erfinv")
    then_body = ov.Model([ops.add(then_x, erfinv_node)], [then_x], "then")
    else_body = ov.Model([ops.negative(else_x)], [else_x], "else")
    node = opset8.if_op(cond)
    node.set_friendly_name("if")
    node.set_then_body(then_body)
    node.set_else_body(else_body)
    node.set_input(x.output(0), then_x, else_x)
    out = node.set_output(then_body.get_results()[0], else_body.get_results()[0])
    out.get_tensor().set_names({"y"})
    return ov.Model([out], [cond, x], "erfinv_in_if_body")


NUMPY_FLOAT = {"f32": np.float32, "f16": np.float16, "f64": np.float64}


def newer_ops_inputs(spec: NewerOpsSpec, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feed = {}
    if spec.erfinv == "parameter":
        feed["x"] = np.array(spec.erfinv_values, NUMPY_FLOAT[spec.dtype])
    elif spec.erfinv != "none":
        feed["x"] = rng.standard_normal(len(spec.erfinv_values)).astype(NUMPY_FLOAT[spec.dtype])
    if spec.one_hot != "none":
        # in range, the last class, -1, -depth, below -depth, depth, in range again
        feed["indices"] = np.resize(np.array([0, 3, -1, -4, -5, 4, 2], np.int64), spec.indices)
    return feed


def erfinv_constant_values(spec: NewerOpsSpec) -> np.ndarray:
    """The values the ErfInv of a ``constant`` / ``f16_constant`` spec reads, in its element type."""
    values = np.array(spec.erfinv_values, NUMPY_FLOAT[spec.dtype])
    if spec.erfinv == "f16_constant":
        values = values.astype(np.float16).astype(NUMPY_FLOAT[spec.dtype])
    return values


def newer_ops_reference(spec: NewerOpsSpec, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Float64 reference of :func:`build_newer_ops`, from the operation specifications."""
    from testkit.reference import erfinv_reference, one_hot_reference

    out = {}
    if spec.erfinv == "parameter":
        out["erfinv"] = np.array([erfinv_reference(float(v)) for v in feed["x"]])
    elif spec.erfinv != "none":
        out["erfinv"] = feed["x"].astype(np.float64) + np.array(
            [erfinv_reference(float(v)) for v in erfinv_constant_values(spec)])
    if spec.one_hot != "none":
        out["one_hot"] = one_hot_reference(feed["indices"], ONE_HOT_DEPTH, ONE_HOT_ON, ONE_HOT_OFF, spec.axis,
                                           spec.one_hot)
    return out


# ---------------------------------------------------------------- RMS normalization

Square = Literal["power", "multiply"]


@dataclass(frozen=True)
class RMSNormSpec:
    """``x * (ReduceMean(x^2, -1) + eps)^-0.5 * gamma`` over the last axis, the form the Gemma exports
    write for their norms (``q_norm`` / ``k_norm`` normalize one head: ``size`` is the head size).

    ``square="power"`` squares with ``Power(x, 2)`` as the exporters do, the form the CPU plugin fuses into
    its RMS node; ``"multiply"`` squares with ``Multiply(x, x)``, the same value in another form.
    ``rows`` are the leading dimensions (batch, tokens, heads), dynamic in the model when ``dynamic``.
    """

    size: int = 8
    rows: tuple[int, ...] = (1, 4, 8)
    square: Square = "power"
    eps: float = 1e-6
    dynamic: bool = True

    @property
    def gamma(self) -> np.ndarray:
        return np.linspace(0.5, 1.5, self.size, dtype=np.float32)


def build_rms_norm(spec: RMSNormSpec) -> ov.Model:
    x_RD = ops.parameter([-1] * len(spec.rows) + [spec.size] if spec.dynamic else [*spec.rows, spec.size],
                         ov.Type.f32, name="x")
    if spec.square == "power":
        squared = ops.power(x_RD, _const(2.0, ov.Type.f32))
    else:
        squared = ops.multiply(x_RD, x_RD)
    mean_R1 = ops.reduce_mean(squared, _i64([-1]), keep_dims=True)
    inv_rms_R1 = ops.power(ops.add(mean_R1, _const(spec.eps, ov.Type.f32)), _const(-0.5, ov.Type.f32))
    out = ops.multiply(ops.multiply(x_RD, inv_rms_R1), ops.constant(spec.gamma))
    result = ops.result(out)
    result.output(0).get_tensor().set_names({"rms_norm"})
    return ov.Model([result], [x_RD], "rms_norm")


def rms_norm_inputs(spec: RMSNormSpec, seed: int = 0) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal((*spec.rows, spec.size)).astype(np.float32)}


def rms_norm_reference(spec: RMSNormSpec, feed: dict[str, np.ndarray]) -> np.ndarray:
    """Float64 reference of :func:`build_rms_norm`."""
    x = feed["x"].astype(np.float64)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + spec.eps) * spec.gamma.astype(np.float64)


# --------------------------------------------------------------------------------------------------
# Eager attention (MatMul -> [scale] -> [mask] -> Softmax -> MatMul), the input of SDPA recovery
# --------------------------------------------------------------------------------------------------
EagerScaleAt = Literal["none", "q", "k", "kT", "scores"]
EagerMask = Literal["none", "float", "select", "select_fill", "select_finite"]
EagerKTranspose = Literal["transpose_b", "transpose", "pretransposed"]
EagerRefuse = Literal["none", "softcap", "dropout", "axis", "weights_output"]

EAGER_FINITE_FILL = -1e4
EAGER_SOFTCAP = 5.0
EAGER_DROPOUT_KEEP = 0.9


@dataclass(frozen=True)
class EagerAttentionSpec(_HeadsSpec):
    """One eager attention subgraph as exporters write it from transformers' ``eager_attention_forward``.

    ``scale_at``: where the scale ``scale_value`` applies (Q, K, K after its transpose ``kT``, or the scores; ``scale_op`` multiplies or
    divides). ``mask``: ``float`` adds a float mask [B, 1, L, S]; ``select`` is ``Select(keep, scores,
    -inf)``, ``select_fill`` ``Select(drop, -inf, scores)`` (masked_fill), ``select_finite`` masked_fill with
    :data:`EAGER_FINITE_FILL`. ``k_transpose``: how K^T is taken (``pretransposed``: K arrives as
    [B, H, E, S] and is multiplied untransposed). ``dtype`` f16/bf16 computes in that type with the
    Softmax in f32 between Converts (transformers' ``softmax(dtype=float32).to(query.dtype)``).
    ``refuse`` adds what is not SDPA: a softcap (``tanh(x / c) * c`` on the scores), a dropout (a
    Multiply of the weights), a Softmax over the query axis, the weights as a second model output.
    """

    scale_at: EagerScaleAt = "scores"
    scale_op: Literal["multiply", "divide"] = "multiply"
    scale_value: float = 0.35
    mask: EagerMask = "float"
    k_transpose: EagerKTranspose = "transpose_b"
    dtype: DType = "f32"
    softmax_opset: Literal[1, 8] = 8
    refuse: EagerRefuse = "none"


def build_eager_attention(spec: EagerAttentionSpec) -> ov.Model:
    """A model computing one eager attention as ``spec`` describes. Inputs q, k, v, [mask]; output
    ``attention`` (and ``weights`` for ``refuse="weights_output"``)."""
    io_et, et = (ov.Type.f16 if spec.dtype == "f16" else ov.Type.f32), ov_type(spec.dtype)
    B, H, Hkv, L, S, E = spec.batch, spec.heads, spec.n_kv_heads, spec.q_len, spec.kv_len, spec.head_dim
    k_shape = [B, Hkv, E, S] if spec.k_transpose == "pretransposed" else [B, Hkv, S, E]
    q_p, k_p, v_p = _param("q", [B, H, L, E], (), io_et), _param("k", k_shape, (), io_et), _param("v", [B, Hkv, S, E], (), io_et)
    params = [q_p, k_p, v_p]
    q, k, v = (_to_compute_type(p, spec.dtype) for p in params)
    if Hkv != H:
        k, v = gqa_broadcast(k, Hkv, H, "k_gqa"), gqa_broadcast(v, Hkv, H, "v_gqa")

    def scalar(value: float) -> ov.Node:
        return ops.constant(np.array(value, np.float32), dtype=et) if spec.dtype != "bf16" else \
            ops.convert(ops.constant(np.float32(value)), et)

    def scaled(x):
        return (ops.multiply if spec.scale_op == "multiply" else ops.divide)(x, scalar(spec.scale_value))

    q = scaled(q) if spec.scale_at == "q" else q
    k = scaled(k) if spec.scale_at == "k" else k
    if spec.k_transpose == "transpose":
        k = ops.transpose(k, ops.constant(np.array([0, 1, 3, 2], np.int64)))
    k = scaled(k) if spec.scale_at == "kT" else k
    scores = ops.matmul(q, k, False, spec.k_transpose == "transpose_b")
    scores = scaled(scores) if spec.scale_at == "scores" else scores
    if spec.refuse == "softcap":
        scores = ops.multiply(ops.tanh(ops.divide(scores, scalar(EAGER_SOFTCAP))), scalar(EAGER_SOFTCAP))
    if spec.mask == "float":
        m_p = _param("mask", [B, 1, L, S], (), io_et)
        params.append(m_p)
        scores = ops.add(scores, _to_compute_type(m_p, spec.dtype))
    elif spec.mask != "none":
        m_p = _param("mask", [B, 1, L, S], (), ov.Type.boolean)   # True: the key is attended
        params.append(m_p)
        fill = scalar(EAGER_FINITE_FILL if spec.mask == "select_finite" else -np.inf)
        scores = (ops.select(ops.logical_not(m_p), fill, scores) if spec.mask == "select_fill"
                  else ops.select(m_p, scores, fill))
    if spec.dtype != "f32":
        scores = ops.convert(scores, ov.Type.f32)
    axis = -2 if spec.refuse == "axis" else -1
    probs = ops.softmax(scores, axis) if spec.softmax_opset == 8 else \
        ov.opset1.softmax(scores, axis % 4)
    probs.set_friendly_name("softmax")
    weights = probs
    if spec.dtype != "f32":
        probs = ops.convert(probs, et)
    if spec.refuse == "dropout":
        keep = np.random.default_rng(5).random((1, 1, L, S)) < EAGER_DROPOUT_KEEP
        probs = ops.multiply(probs, ops.constant((keep / EAGER_DROPOUT_KEEP).astype(np.float32), dtype=et))
    out = ops.matmul(probs, v, False, False)
    out.set_friendly_name("attention")
    out = ops.convert(out, ov.Type.f32) if spec.dtype == "bf16" else out
    results = [ops.result(out)]
    results[0].output(0).set_names({OUTPUT_NAME})
    if spec.refuse == "weights_output":
        results.append(ops.result(weights))
        results[1].output(0).set_names({"weights"})
    return ov.Model(results, params, "eager_attention")


def eager_attention_inputs(spec: EagerAttentionSpec, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for :func:`build_eager_attention`. Boolean masks keep at least one key per row."""
    rng = np.random.default_rng(seed)
    nt = io_numpy_type(spec.dtype)
    B, H, Hkv, L, S, E = spec.batch, spec.heads, spec.n_kv_heads, spec.q_len, spec.kv_len, spec.head_dim
    k_shape = (B, Hkv, E, S) if spec.k_transpose == "pretransposed" else (B, Hkv, S, E)
    data = {"q": rng.standard_normal((B, H, L, E)).astype(nt), "k": rng.standard_normal(k_shape).astype(nt),
            "v": rng.standard_normal((B, Hkv, S, E)).astype(nt)}
    if spec.mask == "float":
        data["mask"] = np.where(rng.random((B, 1, L, S)) > 0.3, 0.0, -1e4).astype(nt)
    elif spec.mask != "none":
        keep = rng.random((B, 1, L, S)) > 0.3
        keep[..., 0] = True
        data["mask"] = keep
    return data


def eager_attention_reference(spec: EagerAttentionSpec, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The float64 reference of :func:`build_eager_attention` (recoverable forms), from the
    ScaledDotProductAttention-13 specification (:func:`~testkit.reference.sdpa_reference`), with
    Q or K scaled first in the model's element type where the eager graph scales them."""
    def as_compute(x):
        return round_to(x, spec.dtype)

    q, k, v = (as_compute(inputs[n]) for n in ("q", "k", "v"))
    if spec.k_transpose == "pretransposed":
        k = np.swapaxes(k, -1, -2)
    rep = spec.heads // spec.n_kv_heads
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = as_compute(np.float64(spec.scale_value))
    factor = s if spec.scale_op == "multiply" else 1.0 / s
    if spec.scale_at == "q":
        q = as_compute(q * s if spec.scale_op == "multiply" else q / s)
    if spec.scale_at in ("k", "kT"):
        k = as_compute(k * s if spec.scale_op == "multiply" else k / s)
    mask = None
    if spec.mask == "float":
        mask = as_compute(inputs["mask"])
    elif spec.mask in ("select", "select_fill"):
        mask = inputs["mask"]
    return sdpa_reference(q, k, v, mask, factor if spec.scale_at == "scores" else 1.0)
