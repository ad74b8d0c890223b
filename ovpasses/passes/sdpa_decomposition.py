"""ScaledDotProductAttentionDecomposition: SDPA (opset13) to the computation of its specification.

The OpenVINO specification of ScaledDotProductAttention-13 defines the operation as::

    attn_weight = MatMul(query, Transpose(key, [-2, -1])) * scale
    attn_weight += attn_bias            # causal triangle, or the mask
    attn_weight = Softmax(attn_weight, axis=-1)
    return MatMul(attn_weight, value)

This pass writes exactly that. In particular the scale multiplies the output of MatMul(Q, K^T); it
is never folded into Q or K: folding changes the order of FP32 roundings. In the specification's order the
decomposition agrees with the plugin's own to about 1e-6 of the output over 16 blocks at f32
(benchmarks/records/2026-11-21-accuracy.md). A Q that arrives already scaled (``Q * s`` feeding an SDPA whose
scale is ``s``) is left as it is, so the result is ``(Q * s) @ K^T * s``, as the specification says.

    Before:                               After:
      Q   K   V  [mask] [scale]             Q      K
       \\  |  /    |     /                    \\    /
        SDPA(causal) ---                  MatMul(transpose_b=True)
                                                |
                                          Multiply(scale | 1/sqrt(E from ShapeOf(Q)))
                                                |
                                          Add(bias)    bias: causal   -> Select(col > row, -inf, 0)
                                                |            boolean  -> Select(mask, 0, -inf)
                                          Softmax(-1)        float    -> mask
                                                |            none     -> (no Add)
                                          MatMul(., V)   <- takes the SDPA's friendly name and output

What this pass writes is the graph; a plugin may still reorder it. Measured on 2026.0.0 and 2026.4.1:
the CPU plugin's common MatMulMultiplyFusion turns ``MatMul(Q, K^T) * scale`` with a Constant scale
into ``MatMul(Q, K^T * scale)``, and the plugin decomposes every SDPA it does not fuse with its own
ScaledDotProductAttentionDecomposition (2026.4.1 scales the scores; 2026.0.0 scales Q or the scores
depending on the shapes). ``benchmarks/accuracy.py`` measures what that does to a deep stack.

``causal=True`` is the top-left aligned upper triangle over (L, S) (``numpy.triu(..., k=1)``), as in
the specification and in PyTorch; the mask input is then ignored, as the specification says.
"""

from __future__ import annotations

import logging

import numpy as np
import openvino as ov
from openvino import opset13 as ops
from openvino.passes import AnyInput, Matcher, MatcherPass, Or, WrapType

from ovpasses._ov import copy_runtime_info
from ovpasses.rules import NodePredicate, Rule

log = logging.getLogger(__name__)

class ScaledDotProductAttentionDecomposition(Rule, MatcherPass):
    """Replace each ScaledDotProductAttention by MatMul -> Multiply(scale) -> [Add(bias)] -> Softmax -> MatMul.

    :param predicate: optional ``node -> bool``; only SDPA nodes it accepts are decomposed.
        Other passes use it to decompose a chosen subset (for example the SDPAs that share a cache).
    """

    NAME = "ScaledDotProductAttentionDecomposition"
    REANALYSES = True   # its SDPAs leave the model
    ACTION = "decompose"
    DESCRIPTION = ("decomposes those SDPAs the barrier cannot take (K/V without a static rank-4 shape) into "
                   "MatMul/Softmax")

    def __init__(self, predicate: NodePredicate | None = None) -> None:
        MatcherPass.__init__(self)
        self.changed: list[str] = []
        self.refused: dict[str, str] = {}

        q, k, v, mask, scale = AnyInput(), AnyInput(), AnyInput(), AnyInput(), AnyInput()
        accepts = (lambda out: predicate(out.get_node())) if predicate is not None else (lambda out: True)
        sdpa_type = "opset13.ScaledDotProductAttention"
        # One alternative per optional-input combination the opset13 operation allows.
        root = Or([
            WrapType(sdpa_type, [q, k, v], accepts),
            WrapType(sdpa_type, [q, k, v, mask], accepts),
            WrapType(sdpa_type, [q, k, v, mask, scale], accepts),
        ])

        def callback(matcher: Matcher) -> bool:
            pvm = matcher.get_pattern_value_map()
            sdpa = matcher.get_match_root()
            out = _decompose(
                sdpa,
                pvm[q],
                pvm[k],
                pvm[v],
                pvm.get(mask),
                pvm.get(scale),
            )
            sdpa.output(0).replace(out)
            self.changed.append(sdpa.get_friendly_name())
            log.debug("%s: decomposed %s", self.NAME, sdpa.get_friendly_name())
            return True

        self.register_matcher(Matcher(root, self.NAME), callback)


def _decompose(sdpa: ov.Node, q: ov.Output, k: ov.Output, v: ov.Output,
               mask: ov.Output | None, scale: ov.Output | None) -> ov.Output:
    """Build the specification's subgraph for one SDPA node and return the output that replaces it."""
    name = sdpa.get_friendly_name()
    et = q.get_element_type()
    causal = bool(sdpa.get_attributes()["causal"])
    new_nodes: list[ov.Node] = []

    def track(node: ov.Node, suffix: str) -> ov.Node:
        node.set_friendly_name(f"{name}/{suffix}")
        new_nodes.append(node)
        return node

    def const(value: float, suffix: str) -> ov.Node:
        if et in (ov.Type.f32, ov.Type.f16, ov.Type.f64):
            return track(ops.constant(np.array(value, dtype=np.float32), dtype=et), suffix)
        # Constant's range check refuses +-inf for bf16 and other types numpy lacks: convert an f32 one
        return track(ops.convert(track(ops.constant(np.float32(value)), f"{suffix}_f32"), et), suffix)

    if scale is None:
        head_dim = track(ops.gather(track(ops.shape_of(q, "i64"), "q_shape"),
                                    track(ops.constant(np.int64(-1)), "last"),
                                    track(ops.constant(np.int64(0)), "axis0")), "head_dim")
        head_dim_t = track(ops.convert_like(head_dim, q), "head_dim_like_q")
        scale = track(ops.divide(const(1.0, "one"), track(ops.sqrt(head_dim_t), "sqrt_head_dim")),
                      "default_scale").output(0)

    qk = track(ops.matmul(q, k, transpose_a=False, transpose_b=True), "qk")
    weights = track(ops.multiply(qk, scale), "qk_scaled").output(0)

    bias = None
    if causal:
        axis0 = track(ops.constant(np.int64(0)), "causal_axis0")
        seq_index = track(ops.constant(np.int64(-2)), "seq_index")
        rows = track(ops.gather(track(ops.shape_of(q, "i64"), "causal_q_shape"), seq_index, axis0), "L")
        cols = track(ops.gather(track(ops.shape_of(k, "i64"), "causal_k_shape"), seq_index, axis0), "S")
        zero_i = track(ops.constant(np.int64(0)), "range_start")
        one_i = track(ops.constant(np.int64(1)), "range_step")
        row_ids = track(ops.unsqueeze(track(ops.range(zero_i, rows, one_i, "i64"), "row_ids"),
                                      track(ops.constant(np.int64(1)), "row_axis")), "row_ids_col")
        col_ids = track(ops.unsqueeze(track(ops.range(zero_i, cols, one_i, "i64"), "col_ids"),
                                      track(ops.constant(np.int64(0)), "col_axis")), "col_ids_row")
        future = track(ops.greater(col_ids, row_ids), "future")
        bias = track(ops.select(future, const(-np.inf, "neg_inf"), const(0.0, "zero")), "causal_bias")
    elif mask is not None:
        if mask.get_element_type() == ov.Type.boolean:
            bias = track(ops.select(mask, const(0.0, "zero"), const(-np.inf, "neg_inf")), "mask_bias")
        else:
            bias = mask
    if bias is not None:
        weights = track(ops.add(weights, bias), "biased").output(0)

    probs = track(ops.softmax(weights, -1), "softmax")
    out = ops.matmul(probs, v, transpose_a=False, transpose_b=False)
    out.set_friendly_name(name)
    new_nodes.append(out)
    copy_runtime_info(sdpa, new_nodes)
    return out.output(0)
