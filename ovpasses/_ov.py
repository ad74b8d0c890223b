"""Small helpers over the OpenVINO Python API that the passes share.

Kept to what the Python bindings lack (``copy_runtime_info``) or spell differently between the
supported runtimes (2025.2 and newer).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import openvino as ov

from ovpasses.errors import OvpassesError

SDPA_TYPE = "ScaledDotProductAttention"


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


def runtime_version(version_string: str | None = None) -> tuple[int, int, int]:
    """Parse an OpenVINO version string (``openvino.get_version()`` by default) into a tuple.

    Accepts forms such as ``2026.4.1-22982-e213a147257-releases/2026/4``, ``2026.0.0`` and ``2026.0``.
    """
    text = ov.get_version() if version_string is None else version_string
    match = re.match(r"\s*(\d{4})\.(\d+)(?:\.(\d+))?", text)
    if match is None:
        raise OvpassesError(
            f"cannot read an OpenVINO version from {text!r}; expected YEAR.MINOR[.PATCH], e.g. 2026.0"
        )
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def is_sdpa(node: ov.Node) -> bool:
    return node.get_type_name() == SDPA_TYPE
