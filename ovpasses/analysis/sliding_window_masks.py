"""Sliding-window attention masks, in the form openvino's PagedAttention converter can read. Changes nothing.

openvino_genai's paged path replaces each SDPA by a PagedAttention node (``SDPAToPagedAttention``); the
mask is dropped, and a sliding window survives only as the node's ``sliding_window`` input, which
the converter fills from a mask it recognises. One of its forms (``gpt_oss_sliding_window_pattern``
in openvino's ``state_management_pattern.cpp``) is also how transformers 5 writes Gemma 4's sliding
mask, except for the last node::

    q_idx + offset(-W) ─┐
    kv_idx ──── [Convert] ── Greater          kv_idx > q_idx - W   (transformers' sliding_window_overlay)
    BitwiseAnd(·, Greater)                    ... and the causal and padding conditions:
    BitwiseAnd(·, ·) x 3                      four BitwiseAnd in all
    Broadcast(·, shape)
    Select(·, 0, -big)          ─> SDPA mask (port 3)            transformers 5 (Gemma 4)
    Select(·, 0, -big) ─> Slice ─> SDPA mask (port 3)            gpt-oss; what the converter matches

:func:`sliding_window_mask_pattern` is that pattern up to the Select; :func:`find_sliding_window_masks`
lists each Select it matches with its window ``W = -offset`` and the SDPAs that read it directly or
through a Slice. ``SlidingWindowMaskSliceInsertion`` matches the same pattern.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import openvino as ov
from openvino.passes import AnyInput, Matcher, Optional, WrapType

from ovpasses._ov import is_sdpa

MASK_PORT = 3


@dataclass(frozen=True)
class SlidingWindowMask:
    """One sliding-window mask: its Select, its window and the SDPAs that read it."""

    select: str                    # friendly name of the Select that builds the mask
    window: int                    # W: key k is seen from query q when k > q - W
    sdpa_direct: tuple[str, ...]   # SDPAs whose mask input is the Select itself: the converter misses W
    sdpa_sliced: tuple[str, ...]   # SDPAs that read it through a Slice: the converter reads W


def sdpa_mask_readers(output: ov.Output) -> list[ov.Input]:
    """The SDPA mask inputs (port 3) that ``output`` feeds directly."""
    return [t for t in output.get_target_inputs() if is_sdpa(t.get_node()) and t.get_index() == MASK_PORT]


def _sliced_readers(output: ov.Output) -> list[ov.Input]:
    return [reader for t in output.get_target_inputs() if t.get_node().get_type_name() == "Slice"
            and t.get_index() == 0 for reader in sdpa_mask_readers(t.get_node().output(0))]


def _window_offset(output: ov.Output) -> bool:
    """An integer Constant holding one negative value: ``q_idx + offset`` with ``offset = -W``."""
    node = output.get_node()
    values = node.get_data() if node.get_type_name() == "Constant" else None
    return (values is not None and values.size == 1 and np.issubdtype(values.dtype, np.integer)
            and int(values.reshape(-1)[0]) < 0)


def window_of(offset: ov.Output) -> int:
    """``W`` from the offset Constant the pattern matched."""
    return -int(offset.get_node().get_data().reshape(-1)[0])


def sliding_window_mask_pattern(select_predicate: Callable[[ov.Output], bool] | None = None) -> tuple[ov.Node, ov.Node]:
    """The pattern (root Select, offset Constant); ``select_predicate`` further restricts the Select."""
    q_idx, kv_idx = AnyInput(), AnyInput()
    kv_idx_converted = Optional(["opset1.Convert"], kv_idx.output(0))
    offset = WrapType("opset1.Constant", _window_offset)
    add = WrapType("opset1.Add", [q_idx.output(0), offset.output(0)])
    greater = WrapType("opset1.Greater", [kv_idx_converted.output(0), add.output(0)])
    and0 = WrapType("opset13.BitwiseAnd", [AnyInput().output(0), greater.output(0)])
    and1 = WrapType("opset13.BitwiseAnd", [and0.output(0), AnyInput().output(0)])
    and2 = WrapType("opset13.BitwiseAnd", [AnyInput().output(0), and1.output(0)])
    and3 = WrapType("opset13.BitwiseAnd", [and2.output(0), AnyInput().output(0)])
    broadcast = WrapType("opset3.Broadcast", [and3.output(0), AnyInput().output(0)])
    inputs = [broadcast.output(0), AnyInput().output(0), AnyInput().output(0)]
    select = (WrapType("opset1.Select", inputs, select_predicate) if select_predicate is not None
              else WrapType("opset1.Select", inputs))
    return select, offset


def find_sliding_window_masks(sdpa_nodes: Iterable[ov.Node]) -> list[SlidingWindowMask]:
    """The sliding-window masks that ``sdpa_nodes`` read as their mask (port 3), directly or through a
    Slice, in the order of the first SDPA that reads each. Looks at the SDPAs' mask inputs only, not
    at the whole graph."""
    select, offset = sliding_window_mask_pattern()
    found, seen = [], set()
    for sdpa in sdpa_nodes:
        if sdpa.get_input_size() <= MASK_PORT:
            continue
        node = sdpa.input_value(MASK_PORT).get_node()
        if node.get_type_name() == "Slice":
            node = node.input_value(0).get_node()
        name = node.get_friendly_name()
        if node.get_type_name() != "Select" or name in seen:
            continue
        seen.add(name)
        matcher = Matcher(select, "SlidingWindowMask")
        if matcher.match(node.output(0)):
            found.append(SlidingWindowMask(
                name, window_of(matcher.get_pattern_value_map()[offset]),
                tuple(sorted(t.get_node().get_friendly_name() for t in sdpa_mask_readers(node.output(0)))),
                tuple(sorted(t.get_node().get_friendly_name() for t in _sliced_readers(node.output(0))))))
    return found
