"""EagerAttentionToSDPA: eager attention subgraphs become ScaledDotProductAttention-13 (SDPA recovery).

Why: an IR whose attention was exported eagerly holds no SDPA. openvino_genai's continuous batching (its
default backend) and OpenVINO Model Server refuse it ("No ScaledDotProductAttention operation observed in
the graph, cannot perform the SDPAToPagedAttention transformation"), and the CPU plugin's stateful kernel
cannot fuse its caches. The subgraph computes exactly what SDPA computes, so it can be one again.

What real exporters write (optimum-intel 2.2.0, transformers 5.5.4 eager attention, ovc 2026.4.1 MOC;
``tests/fixtures/gemma4/tiny8e``, 8 layers: 8 Softmax, 0 SDPA, per layer)::

    Q   = Transpose(RoPE(q_norm(q_proj(x))), [0, 2, 1, 3])                    [B, H, L, D]
    K/V = Reshape(Broadcast(Unsqueeze(cache_Concat, 2), [B, Hkv, H/Hkv, S, D]), [0, H, -1, D])   (repeat_kv)
    scores = MatMul(Q, K, transpose_b=True)        no scale: Gemma 4 scales by 1.0 (q/k norms), MOC drops it
    scores = Add(scores, mask)                     mask = Select(bool, 0.0, -65504.0) [B, 1, L, S], one per kind
    probs  = Softmax(scores, axis=-1)              no Converts in an f32 export
    out    = MatMul(probs, V)                      -> Transpose [0, 2, 1, 3] -> Reshape -> o_proj

The pattern (:func:`~ovpasses.features.sdpa_recovery.analysis.eager_attention_pattern`) also takes the forms
other exports hold: a scale on the scores (Multiply, or Divide: SDPA then gets ``1/s``, rounded once),
K transposed by a Transpose instead of ``transpose_b`` (a scale after that Transpose moves onto K), masked_fill with -inf (Select), and Converts to
f32 and back around the Softmax (f16/bf16 exports: SDPA then computes in the scores' type, its softmax
precision is the plugin's). A scale on Q or on K stays where it is, as part of SDPA's Q or K.

    Before:                                            After:
      Q    K (GQA-expanded)   V (GQA-expanded)           Q    K    V   mask  Constant(scale, 1.0 if none)
       \\  /                   |                            \\   |   /    /     /
      MatMul(Q, K^T) -> [* s] -> [+ mask]                 ScaledDotProductAttention(causal=False)
        -> [Convert] -> Softmax(-1) -> [Convert]            (takes MatMul(probs, V)'s friendly name)
        -> MatMul(., V)

The scale is always an explicit Constant input (read from the graph, never re-derived from the head
size); the mask is the eager graph's own tensor (a masked_fill's condition becomes Select(cond, 0, -inf)
or Select(cond, -inf, 0)). Whatever is not exactly SDPA is left alone, with the reason
:func:`~ovpasses.features.sdpa_recovery.analysis.refusal` gives (in ``refused``): a softcap (Tanh), a dropout, a
Softmax on another axis, a Transpose of K other than a swap of its last two axes, attention weights used
elsewhere, a finite masked_fill.

The GQA expand stays between the cache and the SDPA: the recovered SDPA reads the expanded K/V, as SDPAs
exported by optimum-intel do, so the KV-sharing analysis, the runtime plan and the paged converter see
the same graph they see in an SDPA export.
"""

from __future__ import annotations

import logging

import numpy as np
import openvino as ov
from openvino import opset13 as ops
from openvino.passes import Matcher, MatcherPass

from ovpasses._ov import copy_runtime_info
from ovpasses.features.sdpa_recovery.analysis import eager_attention_pattern, refusal, sdpa_inputs
from ovpasses.rules import NodePredicate, Rule

log = logging.getLogger(__name__)

def _scalar(value: float, et: ov.Type) -> ov.Node:
    """A scalar Constant of ``et`` (bf16 and f16 from an f32 value; ``value`` is finite or -inf)."""
    if et in (ov.Type.f32, ov.Type.f16, ov.Type.f64):
        return ops.constant(np.array(value, dtype=np.float64), dtype=et)
    # Constant's range check refuses -inf for bf16 and other types numpy lacks: convert an f32 one
    return ops.convert(ops.constant(np.float32(value)), et)


class EagerAttentionToSDPA(Rule, MatcherPass):
    """Replace each eager attention subgraph that computes exactly SDPA by one ScaledDotProductAttention.

    :param predicate: optional ``node -> bool`` on MatMul(probs, V); only subgraphs it accepts are replaced.
    After the run, ``changed`` names the new SDPAs (the friendly names of the MatMuls they replaced) and
    ``refused`` maps each refused MatMul to the reason.
    """

    NAME = "EagerAttentionToSDPA"
    REANALYSES = True   # the SDPAs it makes are new to every analysis
    DESCRIPTION = ("recovers ScaledDotProductAttention from eager attention (MatMul -> [scale] -> [mask] -> "
                   "Softmax -> MatMul) where it computes exactly SDPA")

    def __init__(self, predicate: NodePredicate | None = None) -> None:
        MatcherPass.__init__(self)
        self.changed: list[str] = []
        self.refused: dict[str, str] = {}
        p = eager_attention_pattern(None if predicate is None else (lambda out: predicate(out.get_node())))

        def callback(matcher: Matcher) -> bool:
            pvm = matcher.get_pattern_value_map()
            root = matcher.get_match_root()
            name = root.get_friendly_name()
            reason = refusal(pvm, p)
            if reason is not None:
                self.refused[name] = reason
                log.debug("%s: %s left as it is: %s", self.NAME, name, reason)
                return False
            inputs = sdpa_inputs(pvm, p)
            et = inputs.q.get_element_type()
            new_nodes: list[ov.Node] = []
            mask = inputs.mask
            if inputs.mask_select is not None:
                cond, keeps = inputs.mask_select
                zero, neg_inf = _scalar(0.0, et), _scalar(float("-inf"), et)
                select = ops.select(cond, zero, neg_inf) if keeps else ops.select(cond, neg_inf, zero)
                new_nodes += [zero, neg_inf, select]
                mask = select.output(0)
            if mask is None:
                mask = _scalar(0.0, et).output(0)
                new_nodes.append(mask.get_node())
            k = inputs.k
            if inputs.k_scale is not None:   # K^T * s -> (K * s), SDPA transposes it: the same values
                op, constant = inputs.k_scale
                k_scaled = (ops.multiply if op == "Multiply" else ops.divide)(k, constant)
                new_nodes.append(k_scaled)
                k = k_scaled.output(0)
            scale = _scalar(inputs.scale, et)
            sdpa = ops.scaled_dot_product_attention(inputs.q, k, inputs.v, mask, scale, causal=False)
            new_nodes += [scale, sdpa]
            for i, node in enumerate(new_nodes[:-1]):
                node.set_friendly_name(f"{name}/sdpa_input_{i}")
            sdpa.set_friendly_name(name)
            matched = [pvm[label].get_node() for label in (p.k_scaled_mul, p.k_scaled_div, p.qk, p.scaled_mul, p.scaled_div, p.add, p.select_keep,
                                                            p.select_fill, p.up, p.softmax, p.down) if label in pvm]
            copy_runtime_info(matched + [root], new_nodes)
            root.output(0).replace(sdpa.output(0))
            self.changed.append(name)
            log.debug("%s: %s is a ScaledDotProductAttention now (scale %r)", self.NAME, name, inputs.scale)
            return True

        self.register_matcher(Matcher(p.root, self.NAME), callback)
