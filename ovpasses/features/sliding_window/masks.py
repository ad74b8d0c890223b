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

from ovpasses._ov import MASK_PORT, is_sdpa


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


# ---------------------------------------------------------------------------------------------- the distance form

@dataclass(frozen=True)
class DistanceWindowMask:
    """A sliding window written as a distance: ``Select(q_idx - kv_idx >= W, min, causal)`` (transformers 4's
    masks, as optimum-intel 2.2.0's Gemma 3 image-text-to-text export writes its language model's), read by the
    SDPA directly or under ``Select(block, 0, ·)``, which lets an image token see the keys of its image block
    (``opens_blocks``), beyond the window too. In that export the block condition reads the step's own
    ``token_type_ids``, padded with zeros over the past: it opens only keys of the current inference, which a
    bounded cache's SDPA still attends whole (``Concat(past, new)``), so bounding stays exact (an image block
    split over two inferences too: ``tests/test_sliding_window_families.py``). openvino's PagedAttention
    converter does not read this form; the bounding does (:mod:`ovpasses.features.sliding_window.caches`)."""

    select: str                # friendly name of the Select the SDPAs read
    window: int
    sdpa: tuple[str, ...]
    opens_blocks: bool


def _positive_integer(output: ov.Output) -> bool:
    node = output.get_node()
    values = node.get_data() if node.get_type_name() == "Constant" else None
    return (values is not None and values.size == 1 and np.issubdtype(values.dtype, np.integer)
            and int(values.reshape(-1)[0]) > 0)


def _large_negative(output: ov.Output) -> bool:
    """A float Constant of one value at or below -1e30 (the dtype's minimum, or -inf): "not seen"."""
    node = output.get_node()
    values = node.get_data() if node.get_type_name() == "Constant" else None
    return (values is not None and values.size == 1 and np.issubdtype(values.dtype, np.floating)
            and float(values.reshape(-1)[0]) <= -1e30)


def _zero(output: ov.Output) -> bool:
    node = output.get_node()
    values = node.get_data() if node.get_type_name() == "Constant" else None
    return values is not None and values.size == 1 and float(values.reshape(-1)[0]) == 0.0


def distance_window_pattern(under_block_select: bool) -> tuple[ov.Node, ov.Node]:
    """(the Select an SDPA reads, the window Constant): ``Select(GreaterEqual(Subtract(q_idx, kv_idx), W)
    [-> Unsqueeze x 2], min, any)``, under ``Select(any, 0, ·)`` when ``under_block_select``. Two patterns, not an
    Optional root: measured on 2026.4.1, an Optional at the root reports a match for any Select, binding
    nothing below it."""
    distance = WrapType("opset1.Subtract", [AnyInput().output(0), AnyInput().output(0)])
    window = WrapType("opset1.Constant", _positive_integer)
    too_far = WrapType("opset1.GreaterEqual", [distance.output(0), window.output(0)])
    once = Optional(["opset1.Unsqueeze"], [too_far.output(0), AnyInput().output(0)])
    twice = Optional(["opset1.Unsqueeze"], [once.output(0), AnyInput().output(0)])
    unseen = WrapType("opset1.Constant", _large_negative)
    inner = WrapType("opset1.Select", [twice.output(0), unseen.output(0), AnyInput().output(0)])
    if not under_block_select:
        return inner, window
    zero = WrapType("opset1.Constant", _zero)
    return WrapType("opset1.Select", [AnyInput().output(0), zero.output(0), inner.output(0)]), window


def find_distance_window_masks(sdpa_nodes: Iterable[ov.Node]) -> list[DistanceWindowMask]:
    """The distance-form sliding-window masks that ``sdpa_nodes`` read as their mask (port 3), in the order of
    the first SDPA that reads each."""
    patterns = [(True, *distance_window_pattern(True)), (False, *distance_window_pattern(False))]
    found: dict[str, DistanceWindowMask] = {}
    for sdpa in sdpa_nodes:
        if sdpa.get_input_size() <= MASK_PORT:
            continue
        node = sdpa.input_value(MASK_PORT).get_node()
        name = node.get_friendly_name()
        if node.get_type_name() != "Select" or name in found:
            continue
        for opens_blocks, root, window in patterns:
            matcher = Matcher(root, "DistanceWindowMask")
            if matcher.match(node.output(0)):
                readers = sorted(t.get_node().get_friendly_name() for t in sdpa_mask_readers(node.output(0)))
                value = int(matcher.get_pattern_value_map()[window].get_node().get_data().reshape(-1)[0])
                found[name] = DistanceWindowMask(name, value, tuple(readers), opens_blocks)
                break
    return list(found.values())
