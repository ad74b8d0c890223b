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
    After:   Slice(kv_idx) [1,1,1,P+n] ─ Greater' ─ BitwiseAnd' x 4 ([B,1,n,P+n] from its inputs' shapes)
                                                                       ─ Select'(·, 0, -big) ─ SDPA

The walk goes up from the mask through elementwise ops (:data:`ELEMENTWISE`) and Broadcast, and stops at any
other op (a leaf: Unsqueeze, Reshape, Gather, Parameter, Constant, ...). A leaf whose last axis is 1 or which
is a scalar is read as it is (numpy broadcasting aligns last axes, so a lower rank needs nothing); any other leaf
is sliced to ``[start, end)`` on its last axis, or, when that axis is dynamic, to ``[0, 1)`` if it turns out to be
1 at run time (a broadcast axis) and ``[start, end)`` otherwise. The Broadcast that expands the mask to
``[B, 1, n, keys]`` (to a target of its input's rank) is left out: the SDPA broadcasts its mask itself, and a
rebuilt Broadcast costs memory the exported one does not (see :func:`_rebuild`). The other ops are rebuilt, not
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

from ovpasses._ov import constant_values, copy_runtime_info

NARROW_SUFFIX = "/key_columns"
# the open end of the columns when it enters arithmetic (_narrow_leaf multiplies it): in the i32 range, where the CPU
# plugin computes i64 shape arithmetic; every mask is far shorter
OPEN_END = np.iinfo(np.int32).max

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


def slice_keeps_all(node: ov.Node) -> bool:
    """Whether ``node`` is a Slice that keeps all of its input: constant start 0, step 1 and an open end (the
    trimmable form's Slice of all keys, which openvino's paged converters of 2026.0 - 2026.2 read a window through)."""
    if node.get_type_name() != "Slice":
        return False
    start, stop, step = (constant_values(node.input_value(i)) for i in (1, 2, 3))
    if start is None or stop is None or step is None:
        return False
    return list(start) == [0] and list(step) == [1] and stop[0] >= OPEN_END


def _i64(values) -> ov.Node:
    return ops.constant(np.asarray(values, np.int64).reshape(-1))


def _through(node: ov.Node) -> bool:
    """Whether the walk rebuilds ``node`` on narrowed inputs (else it is a leaf)."""
    name = node.get_type_name()
    if name not in ELEMENTWISE:
        return False
    if name == "Broadcast":   # opset3, numpy or bidirectional, to a target of the input's rank (left out: _rebuild)
        rank = node.get_input_partial_shape(0).rank
        target = node.get_input_partial_shape(1)
        return (node.get_input_size() == 2 and node.get_attributes().get("mode") in ("numpy", "bidirectional")
                and target.is_static and rank.is_static and target[0].get_length() == rank.get_length())
    return node.get_attributes().get("auto_broadcast", "numpy") in ("numpy", "none")


def _sources(node: ov.Node) -> list[ov.Output]:
    """The inputs the walk follows from ``node`` (one it goes through): a Broadcast's data, every other op's all."""
    return [node.input_value(0)] if node.get_type_name() == "Broadcast" else list(node.input_values())


def _narrow_leaf(leaf: ov.Output, start: ov.Output, end: ov.Output | None,
                 made: list[ov.Node], axis: int = -1) -> ov.Output | None:
    shape = leaf.get_partial_shape()
    if shape.rank.is_dynamic:
        return None
    if shape.rank.get_length() == 0 or (shape[axis].is_static and shape[axis].get_length() == 1):
        return leaf                                  # broadcast along the columns: read as it is
    stop = _i64([OPEN_END]).output(0) if end is None else end
    if shape[axis].is_static:
        first, last = start, stop
    else:                                            # 1 at run time: a broadcast axis, read [0, 1)
        # first = start * (1 - one), last = stop * (1 - one) + one, in arithmetic: openvino 2025.2's CPU Slice
        # read bounds computed by a Select as an empty range (0 columns; tests/test_sliding_window_mask_columns.py)
        one = ops.convert(ops.equal(ops.gather(ops.shape_of(leaf, "i64"), _i64([axis]), _i64([0])), _i64([1])),
                          ov.Type.i64)
        other = ops.subtract(_i64([1]), one)
        first, last = ops.multiply(start, other), ops.add(ops.multiply(stop, other), one)
        made += [one, other, first, last]
    sliced = opset8.slice(leaf, first, last, _i64([1]), _i64([axis]))
    made.append(sliced)
    return sliced.output(0)


def _rebuild(node: ov.Node, inputs: list[ov.Output], made: list[ov.Node]) -> ov.Output:
    name = node.get_type_name()
    if name == "Broadcast":
        # the mask's expand to [B, 1, n, keys] is left to the SDPA, which broadcasts its mask itself (a same-rank
        # input: its dimensions are the target's or 1). A Broadcast stays, bidirectional to ones (the input's own
        # shape), because openvino's PagedAttention converter finds the window only in Select(Broadcast(..)).
        # Rebuilt to the narrowed target, it cost memory the exported one does not: bidirectional, the CPU plugin
        # makes it Multiply(x, Broadcast(1, target)); numpy, one Broadcast node's output. Prefill peak RSS (MiB):
        # gpt-oss widths 4k whole 4,181 bidirectional / 4,083 numpy / 4,059 to ones (unmodified 4,025); Gemma 3
        # widths 16k whole 5,848 / 6,201 / 5,848 (unmodified 5,844)
        length = node.get_input_partial_shape(1)[0].get_length()
        built = ops.broadcast(inputs[0], _i64(np.ones(length, np.int64)), broadcast_spec="BIDIRECTIONAL")
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
    return rebuild_on_leaves(mask, lambda leaf, made: _narrow_leaf(leaf, start, end, made))


def narrow_axis(leaf: ov.Output, axis: int, start: ov.Output, made: list[ov.Node]) -> ov.Output | None:
    """``leaf`` from ``start`` to its end on ``axis`` (negative), read as it is where that axis is 1 (statically, or
    at run time: then ``[0, 1)``), as the column walk reads a leaf's last axis; None for a leaf of dynamic rank."""
    shape = leaf.get_partial_shape()
    if shape.rank.is_static and shape.rank.get_length() < -axis:
        return leaf
    return _narrow_leaf(leaf, start, None, made, axis)


def walkable(mask: ov.Output) -> bool:
    """Whether ``mask`` is made of ops the walk knows, on leaves of static rank (what :func:`rebuild_on_leaves`
    can rebuild). Builds nothing."""
    if not _through(mask.get_node()):
        return False
    seen, stack = set(), [mask]
    while stack:
        output = stack.pop()
        key = (output.get_node().get_name(), output.get_index())
        if key in seen:
            continue
        seen.add(key)
        node = output.get_node()
        if not _through(node):
            if output.get_partial_shape().rank.is_dynamic:
                return False
            continue
        stack.extend(_sources(node))
    return True


def rebuild_on_leaves(mask: ov.Output, leaf_rule) -> tuple[ov.Output, list[ov.Node]] | None:
    """``mask``'s elementwise ops (the walk of the module docstring) rebuilt on the outputs ``leaf_rule(leaf,
    made)`` gives for its leaves (None: the mask cannot be rebuilt so), and the nodes made; None when ``mask`` is
    itself a leaf or a leaf rule gives None."""
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
            leaf = leaf_rule(output, made)
            if leaf is None:
                return None
            built[key] = leaf
            continue
        sources = _sources(node)
        if not expanded:
            stack.append((output, True))
            stack.extend((s, False) for s in sources if (s.get_node().get_name(), s.get_index()) not in built)
            continue
        built[key] = _rebuild(node, [built[(s.get_node().get_name(), s.get_index())] for s in sources], made)
    return built[(mask.get_node().get_name(), mask.get_index())], made


__all__ = ["ELEMENTWISE", "NARROW_SUFFIX", "narrow_axis", "narrow_key_columns", "rebuild_on_leaves",
           "slice_keeps_all", "walkable"]
