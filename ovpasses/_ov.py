"""Small helpers over the OpenVINO Python API that the passes share.

Kept to what the Python bindings lack (``copy_runtime_info``) or spell differently between the
supported runtimes (2025.2 and newer). Versions of runtimes are :mod:`ovpasses.plan.runtimes`' concern.
"""

from __future__ import annotations

from collections.abc import Iterable

import openvino as ov

SDPA_TYPE = "ScaledDotProductAttention"
# ScaledDotProductAttention-13's inputs (the specification's order; the sink is openvino's sixth input, gpt-oss)
QUERY_PORT, KEY_PORT, VALUE_PORT, MASK_PORT, SCALE_PORT, SINK_PORT = 0, 1, 2, 3, 4, 5


def copy_runtime_info(sources: ov.Node | Iterable[ov.Node], targets: ov.Node | Iterable[ov.Node]) -> None:
    """Copy the runtime info of ``sources`` onto every node of ``targets``.

    The Python bindings have no ``ov::copy_runtime_info``; this merges the source maps in order
    (a later source wins on a key conflict) and keeps keys the target already has that no source sets.
    """
    if isinstance(sources, ov.Node):
        sources = [sources]
    if isinstance(targets, ov.Node):
        targets = [targets]
    merged: dict = {}
    for src in sources:
        for key, value in src.get_rt_info().items():
            merged[key] = value.value if hasattr(value, "value") else value
    for dst in targets:
        rt = dst.get_rt_info()
        for key, value in merged.items():
            rt[key] = value


def is_sdpa(node: ov.Node) -> bool:
    return node.get_type_name() == SDPA_TYPE


def constant_values(output: ov.Output):
    """The values of ``output``, flattened, where a Constant makes it; else None."""
    node = output.get_node()
    return node.get_data().reshape(-1) if node.get_type_name() == "Constant" else None
