"""The GQA expand in front of an SDPA the CPU plugin's stateful kernel does not take, and what replaces it.

Exporters repeat K and V over the query heads (transformers' ``repeat_kv``) as ``Unsqueeze -> Broadcast ->
Reshape`` in front of the SDPA. Where the plugin fuses the SDPA into its stateful kernel, the kernel takes that
expand whole (it never copies the cache). Where it does not (a layer that borrows another layer's cache, Gemma 4
E2B's shared layers; a bounded cache), the expand runs every step as exported: a copy of the cache per query
head, and, for the exporters' bidirectional Broadcast with a computed target, the plugin's ConvertBroadcast3
makes it ``Multiply(kv, Broadcast(1, target))``, a broadcast of ones as large as the expanded cache. The two
rewrites here give the same values without that::

    one KV head:      kv [B, 1, S, D] -> Unsqueeze -> Broadcast -> Reshape -> SDPA(q [B, H, L, D], ...)
                  =>  kv [B, 1, S, D] -> SDPA(q, ...)                 (the SDPA broadcasts the head itself)
    several KV heads: ... -> Broadcast(u, target, bidirectional) -> Reshape -> SDPA
                  =>  ... -> Broadcast(u, ShapeOf(u) * [1, 1, rep, 1, 1], numpy) -> Reshape -> SDPA

Used by :class:`~ovpasses.features.sliding_window.sliding_window_cache_bounding.SlidingWindowKVCacheBounding`
(its bounded caches' readers) and
:class:`~ovpasses.features.unfused_expands.unfused_sdpa_expands.UnfusedSDPAExpandRewrite` (every SDPA the plan
expects unfused, in every mode). Only for SDPAs the kernel does not take: a rebuilt expand
takes a fused layer out of the kernel (measured on tiny8 unshared: 2 fused layers became 0).
"""

from __future__ import annotations

import numpy as np
import openvino as ov
from openvino import opset13 as ops

from ovpasses._ov import constant_values, copy_runtime_info


def gqa_expand(sdpa: ov.Node, port: int) -> tuple[ov.Node, ov.Node, ov.Node] | None:
    """The GQA expand (``Unsqueeze -> Broadcast -> Reshape``, transformers' ``repeat_kv``) in front of ``sdpa``'s
    K or V (``port``), as (unsqueeze, broadcast, reshape), or None."""
    reshape = sdpa.input_value(port).get_node()
    broadcast = reshape.input_value(0).get_node() if reshape.get_input_size() else reshape
    unsqueeze = broadcast.input_value(0).get_node() if broadcast.get_input_size() else broadcast
    if (reshape.get_type_name(), broadcast.get_type_name(), unsqueeze.get_type_name()) != \
            ("Reshape", "Broadcast", "Unsqueeze"):
        return None
    return unsqueeze, broadcast, reshape


def elide_single_head_expand(sdpa: ov.Node, port: int) -> bool:
    """Feed ``sdpa``'s K or V (``port``) from before its GQA expand when that tensor has one KV head,
    ``[B, 1, S, D]``: the SDPA broadcasts it over the query heads (its specification's MatMul broadcasts
    batch dimensions), so the values are the same. Why (measured on 2026.4.1 at E2B's widths, one KV head, 8
    query heads): the expand copies the cache 8 times every step, and in every layer outside the plugin's
    stateful kernel its bidirectional Broadcast runs as a Multiply by a broadcast of ones (``Broadcast
    (ref_f32)``, with reorders; see :func:`numpy_expand`): the bounded form decoded slower than the unmodified
    model at 8k before the bounding elided it. Several KV heads keep the expand (a broadcast would not repeat
    them the way the expand does): :func:`numpy_expand`. Returns whether the input changed."""
    expand = gqa_expand(sdpa, port)
    if expand is None:
        return False
    source = expand[0].input_value(0)
    shape, query = source.get_partial_shape(), sdpa.get_input_partial_shape(0)
    if shape.rank.is_dynamic or shape.rank.get_length() != 4 or shape[1].is_dynamic or shape[1].get_length() != 1 \
            or query.rank.is_dynamic or query.rank.get_length() != 4:
        return False   # several KV heads, or another layout
    sdpa.input(port).replace_source_output(source)
    return True


def rebuilt(expand: tuple[ov.Node, ov.Node, ov.Node]) -> bool:
    """Whether ``expand`` (as :func:`gqa_expand` gives it) is one :func:`numpy_expand` made: its Broadcast is numpy."""
    return expand[1].get_attributes().get("mode") == "numpy"


def numpy_expand(sdpa: ov.Node, port: int) -> bool:
    """Rebuild the GQA expand in front of ``sdpa``'s K or V (``port``) as
    ``Broadcast(u, ShapeOf(u) * [1, .., rep, .., 1], numpy)``, ``u = Unsqueeze(kv)`` ``[B, Hkv, 1, S, D]``:
    the shape ``repeat_kv`` expands to (``rep`` at the inserted axis, every other dimension the input's own),
    so the values are the exported Broadcast's. Why (measured on 2026.4.1, ``out/e2b-kv2-w512``: 2 KV heads, 8
    query heads, 4k context, benchmarks/records/2026-11-25-sliding-window-gqa-expand.md): the exporter's
    Broadcast is bidirectional with a computed target, which the CPU plugin's ConvertBroadcast3 turns into
    ``Multiply(kv, Broadcast(1, target))``
    (a Broadcast of ones as large as the expanded cache, a Reorder and the Multiply, every step, in the
    unmodified IR's unfused layers as in the bounded one); a numpy Broadcast is one copy in the plugin's
    Broadcast node. Returns
    whether it changed; an expand whose inserted axis has no static size, or whose other static sizes are not
    the input's, is left as it is. For SDPAs the plugin's stateful kernel does not take only: the kernel takes
    the exported expand whole, and a rebuilt one takes the layer out of it (measured on tiny8 unshared: 2 fused
    layers became 0)."""
    expand = gqa_expand(sdpa, port)
    if expand is None:
        return False
    unsqueeze, broadcast, _ = expand
    axes = constant_values(unsqueeze.input_value(1))
    inner, outer = unsqueeze.get_output_partial_shape(0), broadcast.get_output_partial_shape(0)
    if axes is None or axes.size != 1 or inner.rank.is_dynamic or outer.rank != inner.rank or rebuilt(expand):
        return False
    axis = int(axes[0]) % inner.rank.get_length()
    if outer[axis].is_dynamic or any(inner[i].is_static and outer[i].is_static and inner[i] != outer[i]
                                     for i in range(inner.rank.get_length()) if i != axis):
        return False
    factors = np.ones(inner.rank.get_length(), np.int64)
    factors[axis] = outer[axis].get_length()
    target = ops.multiply(ops.shape_of(unsqueeze, "i64"), ops.constant(factors))
    replacement = ops.broadcast(unsqueeze.output(0), target, broadcast_spec="NUMPY")
    copy_runtime_info(broadcast, [target, replacement])
    replacement.set_friendly_name(broadcast.get_friendly_name())
    broadcast.output(0).replace(replacement.output(0))
    return True
