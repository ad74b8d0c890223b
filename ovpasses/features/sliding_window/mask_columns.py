"""A mask's key columns ``[start, end)`` built from its inputs, not sliced out of the whole mask (issue 32).

Why: a sliding layer whose cache a program trims reads only the last ``P + n`` key columns of the model's
``[B, 1, n, T + n]`` mask (``P`` positions held, ``n`` new, ``T`` seen). Slicing them out of the mask after its
Select makes the plugin compute the whole mask and copy the slice while the whole one is alive: at Gemma 3 4B
widths, a 16,384-token prompt fed whole, that was +275 MiB of peak RSS over the unmodified model
(``benchmarks/records/2026-11-26-bounded-vs-native.md``). The masks exporters write are elementwise over
broadcast index tensors: the key index ``[1, 1, 1, T+n]``, the query index ``[1, 1, n, 1]``, the padding mask
``[B, 1, 1, T+n]``, combined by comparisons and BitwiseAnd, broadcast and selected into ``0 / -big``. Column ``j``
of the result depends only on column ``j`` of each input whose last axis is not broadcast, so the columns
``[start, end)`` are the same ops on those inputs' columns ``[start, end)``::

    Before:  kv_idx [1,1,1,T+n] ─ Greater ─ BitwiseAnd x 4 ─ Broadcast(·, [B,1,n,T+n]) ─ Select(·, 0, -big)
                                                                                         ─ Slice(start, end) ─ SDPA
    After:   Slice(kv_idx) [1,1,1,P+n] ─ Greater' ─ BitwiseAnd' x 4 ─ Broadcast'(·, [B,1,n,P+n])
                                                                       ─ Select'(·, 0, -big) ─ SDPA

The walk goes up from the mask through elementwise ops (:data:`ELEMENTWISE`) and Broadcast, and stops at any
other op (a leaf: Unsqueeze, Reshape, Gather, Parameter, Constant, ...). A leaf whose last axis is 1 or which
is a scalar is read as it is (numpy broadcasting aligns last axes, so a lower rank needs nothing); any other leaf
is sliced to ``[start, end)`` on its last axis, or, when that axis is dynamic, to ``[0, 1)`` if it turns out to be
1 at run time (a broadcast axis) and ``[start, end)`` otherwise. A Broadcast's target gets its last
element narrowed to ``end - start`` (its own last element less ``start`` when ``end`` is open; a 1 stays 1), and a
bidirectional Broadcast becomes numpy, to the larger of its target and its input's shape. The ops are rebuilt, not
shared: the original mask stays for its other readers (a full-attention layer's mask shares its causal and padding
conditions). Nothing here is specific to a model: any mask made of
these ops narrows; one with a leaf of dynamic rank or an op the walk does not know below a Broadcast gives None,
and the caller slices the mask after it as before.
"""

from __future__ import annotations

import numpy as np
import openvino as ov
from openvino import opset8
from openvino import opset13 as ops

from ovpasses._ov import copy_runtime_info

NARROW_SUFFIX = "/key_columns"
INT64_MAX = np.iinfo(np.int64).max

_BINARY = {
    "Add": ops.add, "Subtract": ops.subtract, "Multiply": ops.multiply,
    "Greater": ops.greater, "GreaterEqual": ops.greater_equal, "Less": ops.less, "LessEqual": ops.less_equal,
    "Equal": ops.equal, "NotEqual": ops.not_equal,
    "BitwiseAnd": ops.bitwise_and, "BitwiseOr": ops.bitwise_or, "BitwiseXor": ops.bitwise_xor,
    "LogicalAnd": ops.logical_and, "LogicalOr": ops.logical_or, "LogicalXor": ops.logical_xor,
}
_UNARY = {"BitwiseNot": ops.bitwise_not, "LogicalNot": ops.logical_not}
# the ops the walk goes through: column j of the output reads column j of each (non-broadcast) input
ELEMENTWISE = frozenset(_BINARY) | frozenset(_UNARY) | {"Select", "Convert", "Broadcast"}


def _i64(values) -> ov.Node:
    return ops.constant(np.asarray(values, np.int64).reshape(-1))


def _through(node: ov.Node) -> bool:
    """Whether the walk rebuilds ``node`` on narrowed inputs (else it is a leaf)."""
    name = node.get_type_name()
    if name not in ELEMENTWISE:
        return False
    if name == "Broadcast":   # opset3, numpy or bidirectional, with a target of known length
        return (node.get_input_size() == 2 and node.get_attributes().get("mode") in ("numpy", "bidirectional")
                and node.get_input_partial_shape(1).is_static)
    return node.get_attributes().get("auto_broadcast", "numpy") in ("numpy", "none")


def _narrow_leaf(leaf: ov.Output, start: ov.Output, end: ov.Output | None,
                 made: list[ov.Node]) -> ov.Output | None:
    shape = leaf.get_partial_shape()
    if shape.rank.is_dynamic:
        return None
    if shape.rank.get_length() == 0 or (shape[-1].is_static and shape[-1].get_length() == 1):
        return leaf                                  # broadcast along the columns: read as it is
    stop = _i64([INT64_MAX]).output(0) if end is None else end
    if shape[-1].is_static:
        first, last = start, stop
    else:                                            # 1 at run time: a broadcast axis, read [0, 1)
        one = ops.equal(ops.gather(ops.shape_of(leaf, "i64"), _i64([-1]), _i64([0])), _i64([1]))
        first, last = ops.select(one, _i64([0]), start), ops.select(one, _i64([1]), stop)
        made += [one, first, last]
    sliced = opset8.slice(leaf, first, last, _i64([1]), _i64([-1]))
    made.append(sliced)
    return sliced.output(0)


def _rebuild(node: ov.Node, inputs: list[ov.Output], start: ov.Output, end: ov.Output | None,
             made: list[ov.Node]) -> ov.Output:
    name = node.get_type_name()
    if name == "Broadcast":
        mode = node.get_attributes()["mode"]
        target = ops.convert(node.input_value(1), ov.Type.i64)
        length = node.get_input_partial_shape(1)[0].get_length()
        # the target's columns (1 stays 1), narrowed
        columns = ops.gather(target, _i64([length - 1]), _i64([0]))
        narrowed = ops.subtract(columns if end is None else end, start)
        width = ops.select(ops.equal(columns, _i64([1])), _i64([1]), narrowed)
        target = ops.scatter_update(target, _i64([length - 1]), width, _i64([0]))
        made += [columns, narrowed, width, target]
        if mode == "bidirectional" and inputs[0].get_partial_shape().rank.is_static and \
                inputs[0].get_partial_shape().rank.get_length() == length:
            # as numpy, to the shape bidirectional gives (each dimension the larger, the other being 1): the CPU
            # plugin turns a bidirectional Broadcast into Multiply(x, Broadcast(1, target)) (ConvertBroadcast3),
            # a numpy one into one Broadcast node. Measured at gpt-oss widths, 4k whole: prefill peak RSS 4,181 MiB
            # bidirectional, 4,082 numpy (unmodified 4,025)
            target = ops.maximum(target, ops.shape_of(inputs[0], "i64"))
            made.append(target)
            mode = "numpy"
        built = ops.broadcast(inputs[0], target, broadcast_spec=mode.upper())
    elif name == "Convert":
        built = ops.convert(inputs[0], node.get_output_element_type(0))
    elif name == "Select":
        built = ops.select(*inputs, auto_broadcast=node.get_attributes().get("auto_broadcast", "numpy"))
    elif name in _UNARY:
        built = _UNARY[name](inputs[0])
    else:
        built = _BINARY[name](*inputs, auto_broadcast=node.get_attributes().get("auto_broadcast", "numpy"))
    built.set_friendly_name(node.get_friendly_name() + NARROW_SUFFIX)
    copy_runtime_info(node, built)
    made.append(built)
    return built.output(0)


def narrow_key_columns(mask: ov.Output, start: ov.Output,
                       end: ov.Output | None = None) -> tuple[ov.Output, list[ov.Node]] | None:
    """The columns ``[start, end)`` (i64 [1] each; ``end`` None: to the last) of ``mask``'s last axis, computed from
    its inputs' columns, and the nodes made; None when ``mask`` is not made of ops the walk knows (see the module
    docstring), or is itself a leaf (nothing to narrow). The walk is iterative and visits each node once."""
    if not _through(mask.get_node()):
        return None
    made: list[ov.Node] = []
    built: dict[tuple[str, int], ov.Output] = {}
    stack: list[tuple[ov.Output, bool]] = [(mask, False)]
    while stack:
        output, expanded = stack.pop()
        key = (output.get_node().get_name(), output.get_index())
        node = output.get_node()
        if key in built:
            continue
        if not _through(node):
            leaf = _narrow_leaf(output, start, end, made)
            if leaf is None:
                return None
            built[key] = leaf
            continue
        sources = [node.input_value(0)] if node.get_type_name() == "Broadcast" else list(node.input_values())
        if not expanded:
            stack.append((output, True))
            stack.extend((s, False) for s in sources if (s.get_node().get_name(), s.get_index()) not in built)
            continue
        built[key] = _rebuild(node, [built[(s.get_node().get_name(), s.get_index())] for s in sources], start, end,
                              made)
    return built[(mask.get_node().get_name(), mask.get_index())], made


__all__ = ["ELEMENTWISE", "NARROW_SUFFIX", "narrow_key_columns"]
