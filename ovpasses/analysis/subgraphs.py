"""Sub-graph operations (Loop, TensorIterator, If): their bodies, and what an analysis that does not look
into them says about them.

An IR serialises each body into the same file: a Loop or TensorIterator has one, an If two (then and
else). :func:`bodies` gives them to walks that do look inside (the op-version analysis);
:func:`body_contents` tells the KV-sharing analysis, which does not, whether a body holds state or
attention, and :func:`unhandled_messages` says, per such operation, what that leaves unanalysed. Every
walk here is iterative.
"""

from __future__ import annotations

import openvino as ov

from ovpasses._ov import SDPA_TYPE
from ovpasses.analysis.cache_chain import variable_id

SUBGRAPH_OPS = {"Loop", "TensorIterator", "If"}


def bodies(node: ov.Node) -> list[ov.Model]:
    """The bodies of a Loop / TensorIterator (one) or an If (two: then, else)."""
    if node.get_type_name() == "If":   # the Python If has no get_internal_subgraphs_size (2026.4.1)
        return [node.get_then_body(), node.get_else_body()]
    return [node.get_function()]


def body_contents(node: ov.Node) -> tuple[set[str], bool]:
    """The variable ids that ReadValue / Assign nodes in the bodies (and nested bodies) of a sub-graph
    operation use, and whether those bodies hold an SDPA."""
    variables: set[str] = set()
    attention = False
    pending = [node]
    while pending:
        op = pending.pop()
        for body in bodies(op):
            for inner in body.get_ordered_ops():
                type_name = inner.get_type_name()
                if type_name in ("ReadValue", "Assign"):
                    variables.add(variable_id(inner))
                elif type_name == SDPA_TYPE:
                    attention = True
                elif type_name in SUBGRAPH_OPS:
                    pending.append(inner)
    return variables, attention


def unhandled_messages(opaque: dict[ov.Node, set[str]], holds_state_or_attention: list[ov.Node],
                       cache_readers: dict[str, tuple[str, ...]], sdpa_order: dict[str, int]) -> list[str]:
    """One message per sub-graph operation that the KV-sharing analysis does not look into: which caches
    it reads (``opaque``: operation -> variable ids) and which SDPAs that keeps from being ``exclusive``
    (``cache_readers``: variable id -> its reading SDPAs; ``sdpa_order``: SDPA -> topological index)."""
    messages = []
    holds = set(holds_state_or_attention)
    for op in dict.fromkeys([*opaque, *holds_state_or_attention]):
        what = f"{op.get_type_name()} '{op.get_friendly_name()}'"
        read = sorted(v for v in opaque.get(op, ()) if v in cache_readers)
        if not read:
            messages.append(f"{what} holds ReadValue, Assign or SDPA nodes in its body; caches and attention "
                            "inside sub-graphs are not analysed")
            continue
        affected = sorted({name for v in read for name in cache_readers[v]}, key=sdpa_order.__getitem__)
        messages.append(
            f"{what} reads cache {', '.join(read)} in a body that is not analysed"
            + (" (it holds ReadValue, Assign or SDPA nodes)" if op in holds else "")
            + "; the cache counts as shared, so "
            + (f"SDPA {', '.join(affected)} is not exclusive" if affected else "no SDPA is affected (none reads it)"))
    return messages
