"""SlidingWindowMaskSliceInsertion: put a no-op Slice on a sliding-window mask so that openvino 2026.0 -
2026.2's PagedAttention converter reads the window from it.

Why: openvino_genai's continuous batching (and OpenVINO Model Server) converts every SDPA into a
PagedAttention node with ``SDPAToPagedAttention`` when it loads the model; the mask is dropped and the
window must become the node's ``sliding_window`` input. The converter of 2026.0 - 2026.2 recognises a
sliding window only in two mask shapes, phi3's and gpt-oss's, and both end in a Slice of the Select
that builds the mask. transformers 5 builds Gemma 4's sliding mask with the same BitwiseAnd chain as
gpt-oss but without that Slice, so the converter sets ``sliding_window = 0`` and every sliding layer
attends to the whole history once the context is longer than the window (measured through
openvino_genai on the tiny8u fixture: transformers' tokens up to the 6th after a 12-token prompt and
none after a 28-token one; with this pass all 20 in both, on 2026.0.0, 2026.1.0 and 2026.2.1). 2026.3
and newer recognise Gemma 4's mask themselves.

    Before:                                            After:
      q_idx + offset(-W) ─┐                              (the same up to the Select)
      kv_idx ─────── Greater                               Select ─> Slice(start 0, stop INT64_MAX,
        BitwiseAnd(·, Greater)                                              step 1, axis -1)
        BitwiseAnd(·, causal) ...  (4 in all)                                 ─> SDPA mask (port 3)
        Broadcast(·, shape)
        Select(·, 0, -big) ─> SDPA mask (port 3)

The Slice takes the whole last axis: the mask, and so every output of the stateful model and of
``ov.Core``, is unchanged. The converter's gpt-oss branch then sets ``sliding_window = -offset = W``:
the key at position ``k`` is seen from query ``q`` when ``k > q - W``, which is transformers'
``sliding_window_overlay``. The pattern is the converter's own gpt-oss pattern without its final Slice
(:func:`ovpasses.features.sliding_window.masks.sliding_window_mask_pattern`); a mask of any other
shape is left alone. Only the SDPAs that read the Select directly as their mask are moved onto the
Slice; a second run, in memory or on the IR read back, finds no such SDPA and changes nothing.

Where this is not enough: the CPU PagedAttention of 2025.2 - 2025.4 ignores the window, and that of
2025.2 - 2026.2 mixes up layers with different head sizes (Gemma 4's sliding and full layers); see
:func:`ovpasses.features.paged_heads.paged_path.paged_warnings`.
"""

from __future__ import annotations

import logging

import numpy as np
from openvino import opset8
from openvino.passes import Matcher, MatcherPass

from ovpasses._ov import copy_runtime_info
from ovpasses.features.sliding_window.masks import (
    sdpa_mask_readers,
    sliding_window_mask_pattern,
    window_of,
)
from ovpasses.rules import Rule, RulePlan

log = logging.getLogger(__name__)

SLICE_SUFFIX = "/sliding_window_slice"


class SlidingWindowMaskSliceInsertion(Rule, MatcherPass):
    """Insert ``Slice(mask, 0, INT64_MAX, 1, axis -1)`` between a sliding-window mask and the SDPAs that
    read it directly. ``self.changed`` lists the masks changed (their Selects' friendly names)."""

    NAME = "SlidingWindowMaskSliceInsertion"
    REANALYSES = True   # its masks reach the SDPAs through a Slice now
    DESCRIPTION = ("2026.0 - 2026.2: no-op Slice after a sliding-window mask, so the paged (PagedAttention) converter "
                   "keeps the window")

    @classmethod
    def from_plan(cls, part: RulePlan) -> SlidingWindowMaskSliceInsertion:
        """Every sliding-window mask an SDPA reads directly (the planned masks)."""
        return cls()

    def __init__(self) -> None:
        MatcherPass.__init__(self)
        self.changed: list[str] = []
        self.refused: dict[str, str] = {}

        # the converter matches Slice(Select) as the mask: only a Select that an SDPA reads directly
        # needs the Slice (a condition on consumers, which input patterns cannot state)
        select, offset = sliding_window_mask_pattern(lambda out: bool(sdpa_mask_readers(out)))

        def callback(matcher: Matcher) -> bool:
            pvm = matcher.get_pattern_value_map()
            mask = pvm[select]
            node = mask.get_node()
            name = node.get_friendly_name()
            i64 = lambda v: opset8.constant(np.array([v], np.int64))  # noqa: E731
            sliced = opset8.slice(mask, i64(0), i64(np.iinfo(np.int64).max), i64(1), i64(-1))
            sliced.set_friendly_name(name + SLICE_SUFFIX)
            copy_runtime_info(node, [sliced] + [sliced.input_value(i).get_node() for i in range(1, 5)])
            readers = sdpa_mask_readers(mask)
            for target in readers:
                target.replace_source_output(sliced.output(0))
            window = window_of(pvm[offset])
            self.changed.append(name)
            log.debug("%s: %s (window %d) now reaches %d SDPA through a Slice", self.NAME, name, window, len(readers))
            return True

        self.register_matcher(Matcher(select, self.NAME), callback)
