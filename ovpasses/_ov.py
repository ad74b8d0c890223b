"""Small helpers over the OpenVINO Python API that the passes share.

Kept to what the Python bindings lack (``copy_runtime_info``), spell differently between the
supported runtimes (2025.2 and newer), or do unsafely (``infer``: a synchronous inference that raises what
failed). Versions of runtimes are :mod:`ovpasses.plan.runtimes`' concern.
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


def infer(request: ov.InferRequest, inputs=None) -> None:
    """Run one inference of ``request`` on ``inputs`` and wait for it; raise what failed in it.

    ``start_async`` and ``wait``, not ``InferRequest.infer``: on one inference thread (``INFERENCE_NUM_THREADS=1``,
    or a process whose affinity holds one CPU, where the CPU plugin compiles one thread) the synchronous ``infer``
    of openvino 2025.2.0, 2026.0.0 and 2026.4.1 returns without raising when the inference failed (a shape check,
    a kernel's error), its outputs the previous inference's or memory never written; ``wait`` raises the error
    (docs/runtimes.md, runtime notes;
    ``tests/test_regressions.py::test_plugin_sync_infer_on_one_thread_hides_the_error``).
    The outputs are the request's (``request.get_output_tensor``)."""
    request.start_async(inputs if inputs is not None else {})
    request.wait()
