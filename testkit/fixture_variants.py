"""Variants of an exported fixture folder: the same export with its weights changed the way users' exports
differ from the fixtures. Tests and tools that need such an IR make it here, never by hand.

* :func:`fill_weight` — one named Constant, or some of its rows, set to one value (NaN: an export whose
  logits are NaN on every runtime, as an overflowing or corrupt checkpoint gives).
* :func:`scale_sdpa` — a wrong rewrite: every SDPA's scale multiplied once more.
* :func:`compress_weights` — every MatMul weight stored as NNCF's ``compress_weights`` stores it: an
  integer Constant (``u8`` asymmetric per output channel, or ``u4``/``i4`` in groups along the input
  channels) decompressed by Convert -> Subtract(zero point) -> Multiply(scale) in f16, then Convert to
  f32, the pattern the CPU plugin turns into a FullyConnected with compressed weights::

      Before:                       After:
        W f32 [N, K]                  W u8 [N, K]   zp u8 [N, 1]
          |                             |             |
        MatMul(x, W, transpose_b)     Convert(f16)  Convert(f16)
                                          \\         /
                                           Subtract     scale f16 [N, 1]
                                               \\         /
                                                Multiply
                                                   |
                                              Convert(f32) -> MatMul(x, ., transpose_b)

  (int4: ``W [N, K/G, G]``, ``zp``/``scale [N, K/G, 1]``, a Reshape to ``[N, K]`` before the Convert.)

:func:`variant_folder` copies an export folder and writes a changed model in it.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import numpy as np
import openvino as ov
from openvino import opset13 as ops

Compression = Literal["int8_asym", "int4_asym", "int4_sym"]


def _weight(matmul: ov.Node) -> tuple[ov.Node, bool] | None:
    """The f32 rank-2 Constant that ``matmul`` multiplies by (its input 1), and its transpose_b; else None."""
    node = matmul.input_value(1).get_node()
    if node.get_type_name() != "Constant" or node.get_element_type() != ov.Type.f32 \
            or node.get_output_partial_shape(0).rank.get_length() != 2:
        return None
    return node, matmul.get_attributes()["transpose_b"]


def _decompressed(w_NK: np.ndarray, mode: Compression, group_size: int, name: str) -> ov.Output:
    """The subgraph that gives back ``w_NK`` (rows: output channels) from integer weights, as NNCF writes it."""
    n, k = w_NK.shape
    grouped = mode != "int8_asym"
    groups = k // group_size if grouped and k % group_size == 0 else 1
    w = w_NK.reshape(n, groups, k // groups).astype(np.float64)
    low, high = w.min(axis=2, keepdims=True), w.max(axis=2, keepdims=True)
    if mode == "int4_sym":
        scale = np.maximum(np.abs(low), np.abs(high)) / 8.0
        scale[scale == 0] = 1.0
        q, zero, et = np.clip(np.round(w / scale), -8, 7), None, ov.Type.i4
    else:
        levels = 255 if mode == "int8_asym" else 15
        scale = (high - low) / levels
        scale[scale == 0] = 1.0
        zero = np.clip(np.round(-low / scale), 0, levels)
        q, et = np.clip(np.round(w / scale) + zero, 0, levels), ov.Type.u8 if mode == "int8_asym" else ov.Type.u4
    if not grouped:   # per output channel: [N, K] weights, [N, 1] scales and zero points
        q, scale, zero = q[:, 0, :], scale[:, 0, :], zero[:, 0, :]
    stored = ov.op.Constant(et, ov.Shape(list(q.shape)), q.astype(np.int64).ravel().tolist())
    stored.set_friendly_name(f"{name}/compressed")
    shifted = ops.convert(stored, ov.Type.f16)
    if zero is not None:
        zero_point = ov.op.Constant(et, ov.Shape(list(zero.shape)), zero.astype(np.int64).ravel().tolist())
        zero_point.set_friendly_name(f"{name}/zero_point")
        shifted = ops.subtract(shifted, ops.convert(zero_point, ov.Type.f16))
    scaled = ops.multiply(shifted, ops.constant(scale.astype(np.float16), dtype=ov.Type.f16, name=f"{name}/scale"))
    if grouped:
        scaled = ops.reshape(scaled, ops.constant(np.array([n, k], np.int64)), special_zero=False)
    return ops.convert(scaled, ov.Type.f32).output(0)


def compress_weights(model: ov.Model, mode: Compression = "int8_asym", group_size: int = 32,
                     min_size: int = 1024) -> int:
    """Store every f32 MatMul weight of ``model`` with at least ``min_size`` elements as NNCF does (see the
    module's docstring), in place. Returns the number of weights compressed."""
    count = 0
    for node in model.get_ordered_ops():
        if node.get_type_name() != "MatMul" or (found := _weight(node)) is None:
            continue
        constant, transpose_b = found
        data = constant.get_data()
        if data.size < min_size:
            continue
        w_NK = data if transpose_b else data.T
        replacement = _decompressed(np.ascontiguousarray(w_NK), mode, group_size, constant.get_friendly_name())
        if not transpose_b:
            replacement = ops.transpose(replacement, ops.constant(np.array([1, 0], np.int64))).output(0)
        node.input(1).replace_source_output(replacement)
        count += 1
    model.validate_nodes_and_infer_types()
    return count


def fill_weight(model: ov.Model, name: str, value: float, rows: list[int] | None = None) -> None:
    """Set the elements of the Constant whose friendly name is ``name`` to ``value`` (only those of
    ``rows``, along dim 0, when given), in place."""
    constant = next((n for n in model.get_ordered_ops() if n.get_friendly_name() == name
                     and n.get_type_name() == "Constant"), None)
    if constant is None:
        raise KeyError(f"no Constant named {name!r} in the model")
    data = constant.get_data().astype(np.float32)
    data[slice(None) if rows is None else rows] = value
    filled = ops.constant(data, dtype=constant.get_element_type(), name=name)
    for target in list(constant.output(0).get_target_inputs()):
        target.replace_source_output(filled.output(0))


def variant_folder(source: Path, target: Path, change: Callable[[ov.Model], object],
                   model_file: str = "openvino_model.xml") -> Path:
    """Copy the export folder ``source`` to ``target`` (new) and replace its ``model_file`` by the model
    that ``change`` made of it (in place). Returns the path of the changed IR."""
    shutil.copytree(source, target)
    model = ov.Core().read_model(source / model_file)
    change(model)
    xml = target / model_file
    xml.unlink()
    xml.with_suffix(".bin").unlink()
    ov.save_model(model, xml, compress_to_fp16=False)
    return xml


def scale_sdpa(model: ov.Model, factor: float) -> int:
    """Multiply the scale of every ScaledDotProductAttention of ``model`` by ``factor``, in place: a wrong
    rewrite (a decomposition that applies its own 1/sqrt(head size) on top of the exported scale, as one
    that ignores the scale input would), for tests that must catch one. Every SDPA must have an explicit
    scale input. Returns the number of SDPAs changed."""
    count = 0
    for node in model.get_ordered_ops():
        if node.get_type_name() != "ScaledDotProductAttention":
            continue
        if node.get_input_size() < 5:
            raise ValueError(f"SDPA '{node.get_friendly_name()}' has no scale input to change")
        scale = node.input_value(4)
        node.input(4).replace_source_output(
            ops.multiply(scale, ops.constant(np.array(factor, np.float32), dtype=scale.get_element_type())).output(0))
        count += 1
    model.validate_nodes_and_infer_types()
    return count
