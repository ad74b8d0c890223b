"""Eager attention: the MatMul/Softmax subgraphs that compute ScaledDotProductAttention-13, found and judged.
Changes nothing.

An exporter that traces transformers' eager attention (``attn_implementation="eager"``) writes, per layer::

    scores = MatMul(Q', K')                  K' = K with transpose_b, or Transpose(K, swap of the last two axes)
    [K' = K'^T * s | K'^T / s]               a scale after K's Transpose
    [scores = scores * s  |  scores / s]     s: a Constant of one element (also a Convert of one)
    [scores = scores + mask                  a float mask
     | Select(cond, scores, -inf) | Select(cond, -inf, scores)]   masked_fill with -inf
    [Convert(f32)] -> Softmax(last axis) -> [Convert(back)]
    out = MatMul(probs, V)

where Q' and K' may already be scaled (``Q * s``, ``K / s``) and K/V may reach the MatMuls through the GQA
expand (Unsqueeze -> Broadcast -> Reshape, transformers' ``repeat_kv``). Those stay what they are: they
are SDPA's Q, K and V. :func:`eager_attention_pattern` is the one pattern of these forms (the pass
:class:`~ovpasses.features.sdpa_recovery.eager_attention_to_sdpa.EagerAttentionToSDPA` matches it), and :func:`refusal`
the one predicate that says why a match is not exactly SDPA, as a sentence (None: it is).

:func:`find_eager_attention` lists every attention-like Softmax of a model (its output, through an
optional Convert, is input 0 of a MatMul) with whether it is recoverable and why not: a match refused by
:func:`refusal`, or no match at all, explained by the operations between the scores MatMul and the
Softmax (a softcap's Tanh, say) or after it (a dropout's Multiply).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import openvino as ov
from openvino.passes import AnyInput, Matcher, Optional, Or, WrapType

from ovpasses.precision import round_to_bf16

SOFTMAX_TYPES = ["opset1.Softmax", "opset8.Softmax"]
NEG_INF = float("-inf")


@dataclass(frozen=True)
class EagerAttentionPattern:
    """The labels of the eager attention pattern (read a match through ``get_pattern_value_map()``)."""

    root: WrapType        # MatMul(probs, V): the node the SDPA replaces
    q: AnyInput
    k_in: AnyInput        # the MatMul's K operand, or the input of its Transpose
    k_transpose: Optional
    k_scale: WrapType     # a scale Constant of K^T (Transpose -> Multiply/Divide -> MatMul)
    k_scaled_mul: WrapType
    k_scaled_div: WrapType
    qk: WrapType
    scale: WrapType       # the scale Constant
    scaled_mul: WrapType
    scaled_div: WrapType
    mask: AnyInput
    add: WrapType
    cond: AnyInput
    fill: WrapType        # the masked_fill Constant
    select_keep: WrapType   # Select(cond, scores, fill)
    select_fill: WrapType   # Select(cond, fill, scores)
    up: Optional          # Convert before the Softmax
    softmax: WrapType
    down: Optional        # Convert after it
    v: AnyInput

    def intermediates(self) -> tuple:
        """The labels whose output must feed only the next node of the subgraph."""
        return (self.k_scaled_mul, self.k_scaled_div, self.qk, self.scaled_mul, self.scaled_div, self.add, self.select_keep, self.select_fill, self.up,
                self.softmax, self.down)


def eager_attention_pattern(root_predicate=None) -> EagerAttentionPattern:
    """The pattern of every form in the module docstring; ``root_predicate`` (``Output -> bool``) filters
    the MatMul(probs, V) roots."""
    q, k_in, v, mask, cond = AnyInput(), AnyInput(), AnyInput(), AnyInput(), AnyInput()
    k_transpose = Optional(["opset1.Transpose"], [k_in.output(0), WrapType("opset1.Constant").output(0)])
    k_scale = WrapType("opset1.Constant")
    k_scale_in = Optional(["opset1.Convert"], k_scale.output(0))
    k_scaled_mul = WrapType("opset1.Multiply", [k_transpose.output(0), k_scale_in.output(0)])
    k_scaled_div = WrapType("opset1.Divide", [k_transpose.output(0), k_scale_in.output(0)])
    k_operand = Or([k_scaled_mul.output(0), k_scaled_div.output(0), k_transpose.output(0)])
    qk = WrapType("opset1.MatMul", [q.output(0), k_operand.output(0)])
    scale = WrapType("opset1.Constant")
    scale_in = Optional(["opset1.Convert"], scale.output(0))
    scaled_mul = WrapType("opset1.Multiply", [qk.output(0), scale_in.output(0)])
    scaled_div = WrapType("opset1.Divide", [qk.output(0), scale_in.output(0)])
    scaled = Or([scaled_mul.output(0), scaled_div.output(0), qk.output(0)])
    fill = WrapType("opset1.Constant")
    fill_in = Optional(["opset1.Convert"], fill.output(0))
    add = WrapType("opset1.Add", [scaled.output(0), mask.output(0)])
    select_keep = WrapType("opset1.Select", [cond.output(0), scaled.output(0), fill_in.output(0)])
    select_fill = WrapType("opset1.Select", [cond.output(0), fill_in.output(0), scaled.output(0)])
    biased = Or([add.output(0), select_keep.output(0), select_fill.output(0), scaled.output(0)])
    up = Optional(["opset1.Convert"], biased.output(0))
    softmax = WrapType(SOFTMAX_TYPES, up.output(0))
    down = Optional(["opset1.Convert"], softmax.output(0))
    inputs = [down.output(0), v.output(0)]
    root = (WrapType("opset1.MatMul", inputs) if root_predicate is None else
            WrapType("opset1.MatMul", inputs, root_predicate))
    return EagerAttentionPattern(root, q, k_in, k_transpose, k_scale, k_scaled_mul, k_scaled_div, qk, scale, scaled_mul, scaled_div, mask, add, cond,
                                 fill, select_keep, select_fill, up, softmax, down, v)


@dataclass(frozen=True)
class SDPAInputs:
    """What the SDPA that replaces a match reads: Q, K (as SDPA takes it: [..., S, E]), V, the float mask
    (or ``mask_select``: the condition of a masked_fill with -inf, to become a float mask of 0 and -inf) and
    the scale (1.0 where the scores are not scaled)."""

    q: ov.Output
    k: ov.Output
    v: ov.Output
    mask: ov.Output | None
    mask_select: tuple[ov.Output, bool] | None   # (condition, True when the condition keeps the scores)
    scale: float
    # K^T scaled after its Transpose: (the op, "Multiply" or "Divide", and its Constant) to apply to K itself
    # (an elementwise scalar op commutes with the transpose: the same values)
    k_scale: tuple[str, ov.Output] | None = None


def _constant_value(output: ov.Output) -> np.ndarray:
    """The values of a Constant, or of Convert(Constant) in the Convert's type (as the graph computes them)."""
    node = output.get_node()
    if node.get_type_name() != "Convert":
        return np.asarray(node.get_data(), dtype=np.float64)
    values = np.asarray(node.input_value(0).get_node().get_data(), dtype=np.float64)
    et = node.get_output_element_type(0)
    if et == ov.Type.f16:
        return values.astype(np.float16).astype(np.float64)
    return round_to_bf16(values) if et == ov.Type.bf16 else values.astype(np.float32).astype(np.float64)


def _rank(output: ov.Output) -> int | None:
    rank = output.get_partial_shape().rank
    return rank.get_length() if rank.is_static else None


def _axis_swap(perm: np.ndarray, rank: int) -> bool:
    expected = list(range(rank))
    expected[-2:] = expected[-1], expected[-2]
    return [int(p) % rank for p in perm.ravel()] == expected


def refusal(pvm, p: EagerAttentionPattern) -> str | None:
    """Why the match ``pvm`` of ``p`` is not exactly ScaledDotProductAttention-13 (None: it is).

    What the pattern cannot say: one consumer per intermediate node, static equal ranks, which axes the
    MatMuls and the Softmax work on, one-element scales, -inf fills, and that the Converts around the
    Softmax go to f32 and back to the scores' type."""
    qk, root, softmax = pvm[p.qk].get_node(), pvm[p.root].get_node(), pvm[p.softmax].get_node()
    for label in p.intermediates():
        if label in pvm and len(pvm[label].get_target_inputs()) != 1:
            node = pvm[label].get_node()
            return (f"{node.get_type_name()} {node.get_friendly_name()} also feeds "
                    f"{len(pvm[label].get_target_inputs()) - 1} other input(s) (the attention weights are used elsewhere)")
    ranks = {_rank(pvm[label]) for label in (p.q, p.qk, p.v)} | {_rank(qk.input_value(1))}
    if len(ranks) != 1 or None in ranks or min(ranks) < 3:
        return f"Q, K, V and the scores have ranks {sorted(ranks, key=str)}: SDPA needs one static rank of at least 3"
    rank = ranks.pop()
    if qk.get_attributes()["transpose_a"]:
        return "MatMul(Q, K) transposes Q"
    if not qk.get_attributes()["transpose_b"]:
        if p.k_transpose not in pvm:
            return "MatMul(Q, K) takes K untransposed (no Transpose swapping its last two axes right before the MatMul)"
        perm = _constant_value(pvm[p.k_transpose].get_node().input_value(1))
        if not _axis_swap(perm, rank):
            return f"K reaches MatMul(Q, K) through Transpose {perm.astype(int).tolist()}, not a swap of the last two axes"
    attrs = root.get_attributes()
    if attrs["transpose_a"] or attrs["transpose_b"]:
        return "MatMul(probs, V) transposes an operand"
    axis = int(softmax.get_attributes()["axis"])
    if axis % rank != rank - 1:
        return f"Softmax over axis {axis}, not the last (key) axis"
    for label, scale, what in ((p.scaled_mul, p.scale, "the scores"), (p.scaled_div, p.scale, "the scores"),
                               (p.k_scaled_mul, p.k_scale, "K"), (p.k_scaled_div, p.k_scale, "K")):
        if label in pvm and _constant_value(pvm[scale]).size != 1:
            return f"{what} scaled by a Constant of shape {list(_constant_value(pvm[scale]).shape)}, not one value"
    for label in (p.select_keep, p.select_fill):
        if label in pvm:
            fill = _constant_value(pvm[p.fill])
            if fill.size != 1 or fill.ravel()[0] != NEG_INF:
                return (f"masked_fill with {fill.ravel()[:1].tolist()}, not -inf: a row whose keys are all masked "
                        "attends uniformly in the eager graph, not in SDPA")
    if p.add in pvm:
        mask_rank = _rank(pvm[p.mask])
        if mask_rank is None or mask_rank > rank or pvm[p.add].get_partial_shape().rank.get_length() != rank:
            return f"the mask (rank {mask_rank}) does not broadcast to the scores (rank {rank})"
    et = qk.get_output_element_type(0)
    if root.get_output_element_type(0) != et:
        return f"the scores are {et} but MatMul(probs, V) computes in {root.get_output_element_type(0)}"
    if (p.up in pvm) != (p.down in pvm):
        return "one Convert around the Softmax without the other"
    if p.up in pvm and pvm[p.up].get_element_type() != ov.Type.f32:
        return f"the Softmax runs in {pvm[p.up].get_element_type()}, not f32"
    return None


def sdpa_inputs(pvm, p: EagerAttentionPattern) -> SDPAInputs:
    """What the SDPA reads, for a match that :func:`refusal` accepts."""
    qk = pvm[p.qk].get_node()
    k = qk.input_value(1) if qk.get_attributes()["transpose_b"] else pvm[p.k_in]
    k_scale = None
    if not qk.get_attributes()["transpose_b"] and (p.k_scaled_mul in pvm or p.k_scaled_div in pvm):
        op = pvm[p.k_scaled_mul if p.k_scaled_mul in pvm else p.k_scaled_div].get_node()
        k_scale = (op.get_type_name(), op.input_value(1))
    scale = 1.0
    if p.scaled_mul in pvm:
        scale = float(_constant_value(pvm[p.scale]).ravel()[0])
    elif p.scaled_div in pvm:
        scale = 1.0 / float(_constant_value(pvm[p.scale]).ravel()[0])
    select = None
    if p.select_keep in pvm or p.select_fill in pvm:
        select = (pvm[p.cond], p.select_keep in pvm)
    return SDPAInputs(pvm[p.q], k, pvm[p.v], pvm[p.mask] if p.add in pvm else None, select, scale, k_scale)


def form_of(pvm, p: EagerAttentionPattern) -> dict:
    """The form a match has, as plain data (for reports): scale site and value, mask kind, K transpose, Converts."""
    scale_at = "scores" if (p.scaled_mul in pvm or p.scaled_div in pvm) else "none"
    mask = ("float" if p.add in pvm else "select" if (p.select_keep in pvm or p.select_fill in pvm) else "none")
    return {"scale_at": scale_at, "scale_op": "divide" if p.scaled_div in pvm else "multiply",
            "mask": mask, "k_transpose": "Transpose" if p.k_transpose in pvm and not
            pvm[p.qk].get_node().get_attributes()["transpose_b"] else "transpose_b",
            "softmax_converts": p.up in pvm}


@dataclass(frozen=True)
class EagerAttention:
    """One attention-like Softmax: the MatMul(probs, V) it feeds (its name is the SDPA's once recovered),
    whether the subgraph is exactly SDPA, and why not."""

    name: str                   # friendly name of MatMul(probs, V)
    softmax: str
    recoverable: bool
    reason: str                 # why not ("" when recoverable)
    form: dict | None = None    # see form_of (None: no match)

    def to_dict(self) -> dict:
        return {"name": self.name, "softmax": self.softmax, "recoverable": self.recoverable, "reason": self.reason,
                "form": self.form}


# operations an eager attention may hold between MatMul(Q, K) and the Softmax, and after it
ALLOWED_BEFORE = {"Multiply", "Divide", "Add", "Select", "Convert"}
MAX_WALK = 12


def _probs_consumer(softmax: ov.Node) -> ov.Node | None:
    """A MatMul the Softmax feeds as input 0, directly or through up to two other operations (a Convert,
    or one that explains why the subgraph is not SDPA)."""
    outputs = [softmax.output(0)]
    for _ in range(3):
        later = []
        for out in outputs:
            for target in out.get_target_inputs():
                node = target.get_node()
                if node.get_type_name() == "MatMul" and target.get_index() == 0:
                    return node
                if node.get_type_name() not in ("Result", "MatMul"):
                    later.append(node.output(0))
        outputs = later
    return None


def _unmatched_reason(softmax: ov.Node, consumer: ov.Node) -> str:
    """Why no form matched: the first operation outside the forms between the scores MatMul and the
    Softmax (following input 0 of each), or between the Softmax and MatMul(probs, V)."""
    node = consumer.input_value(0).get_node()
    while node is not softmax:
        if node.get_type_name() != "Convert":
            return f"{node.get_type_name()} {node.get_friendly_name()} between the Softmax and MatMul(probs, V) (a dropout?)"
        node = node.input_value(0).get_node()
    node = softmax.input_value(0).get_node()
    for _ in range(MAX_WALK):
        kind = node.get_type_name()
        if kind == "MatMul":
            return "the scores MatMul is reached, but the subgraph matches no recoverable form"
        if kind == "Tanh":
            return f"softcap: Tanh {node.get_friendly_name()} on the scores (SDPA has no softcap)"
        if kind not in ALLOWED_BEFORE:
            return f"{kind} {node.get_friendly_name()} on the scores, which SDPA does not compute"
        node = node.input_value(0).get_node()
    return f"no MatMul(Q, K) within {MAX_WALK} operations before the Softmax"


def find_eager_attention(model: ov.Model, ordered: list[ov.Node] | None = None) -> list[EagerAttention]:
    """Every Softmax of ``model`` whose output (through at most two single-consumer nodes) is input 0 of a
    MatMul, in topological order, judged by the pattern and :func:`refusal`. ``ordered``: the model's
    ``get_ordered_ops()``, or its Softmax nodes in that order, where the caller has them."""
    p = matcher = None   # built at the first Softmax: the pattern costs more than the walk (15 ms of a 35-layer
    found = []           # IR's 100 ms rewrite), and an IR exported with SDPA has no Softmax outside them
    for node in model.get_ordered_ops() if ordered is None else ordered:
        if node.get_type_name() != "Softmax":
            continue
        consumer = _probs_consumer(node)
        if consumer is None:
            continue
        if matcher is None:
            p = eager_attention_pattern()
            matcher = Matcher(p.root, "EagerAttention")
        name, softmax = consumer.get_friendly_name(), node.get_friendly_name()
        if matcher.match(consumer.output(0)):
            pvm = matcher.get_pattern_value_map()
            if pvm[p.softmax].get_node().get_friendly_name() != softmax:
                found.append(EagerAttention(name, softmax, False, _unmatched_reason(node, consumer)))
                continue
            reason = refusal(pvm, p)
            found.append(EagerAttention(name, softmax, reason is None, reason or "", form_of(pvm, p)))
        else:
            found.append(EagerAttention(name, softmax, False, _unmatched_reason(node, consumer)))
    return found
