"""SDPAMaskExpandElimination: a mask that only SDPAs read is not expanded to ``[B, 1, n, keys]`` before them; the
SDPA broadcasts its mask itself (``sliding_window="trimmable"``; issue 32).

Why: transformers' masks end in ``Select(Broadcast(cond, [B, 1, n, keys]), 0, -big)``. The condition is already
``[B, 1, n, keys]`` (the causal ``[1, 1, n, keys]`` and the padding ``[B, 1, 1, keys]`` combined), so the expand
copies it, and the CPU plugin makes a bidirectional Broadcast a ``Multiply(cond, Broadcast(1, target))``: two u8
``[n, keys]`` tensors more beside the mask itself. For a full-attention layer's mask of a prompt fed whole that is
256 MiB each at 16k (1 GiB at 32k), held while the layers run. Its readers do not need it: an SDPA's mask only has to
broadcast to ``[B, H, n, keys]``, and the condition does wherever its expand did (each of its dimensions is the
expand's or 1). With the expand's target ones the plugin builds the whole mask in one fused node. Measured fed whole
against the unmodified model (record 2026-11-27-mask-expand.md): gpt-oss-20b widths 4k / 8k / 16k peak RSS 0.969x /
0.970x / 0.978x (0.984x / 0.984x / 0.994x without the rule), Gemma 3 4B widths 16k 0.946x (0.962x); 4k / 8k 12-16
MiB above the form without it (0.9955x / 0.987x): the plugin's memory groups move with it. Not planned on a model
given a blocked first prompt: there the groups took 116 / 232 MiB more at gpt-oss widths, 8k / 16k
(:func:`~ovpasses.features.sliding_window.plan.mask_expand_part`).

    Before:  cond [B|1, 1, n|1, keys|1] -> Broadcast(cond, [B, 1, n, keys]) -> Select(., 0, -big) -> SDPA mask
    After:   cond [B|1, 1, n|1, keys|1] -> Broadcast(cond, ones)            -> Select(., 0, -big) -> SDPA mask

A Broadcast to ones stays (its output is the condition's own shape): openvino's PagedAttention converter finds a
sliding window only in ``Select(Broadcast(..))`` (as the trimmable form's rebuilt masks keep it:
:mod:`~ovpasses.features.sliding_window.mask_columns`). Outputs are unchanged. A Select is taken when every reader
is an SDPA's mask (directly, or through the Slice of all keys that the trimmable form keeps for the paged
converters of 2026.0 - 2026.2), and its Broadcast is opset3's, numpy or bidirectional, to a target of the
condition's rank that is not ones already (a second run, or the IR read back, finds nothing).
"""

from __future__ import annotations

import logging

import numpy as np
import openvino as ov
from openvino import opset13 as ops

from ovpasses._ov import constant_values, copy_runtime_info, is_sdpa
from ovpasses.features.sliding_window.mask_columns import slice_keeps_all
from ovpasses.features.sliding_window.masks import MASK_PORT, sdpa_mask_readers
from ovpasses.rules import NamedNodesPass

log = logging.getLogger(__name__)

SUFFIX = "/own_shape"


def _all_keys_slice(node: ov.Node) -> bool:
    """The trimmable form's Slice of all keys for the paged converters (on the mask's last axis)."""
    if node.get_input_size() != 5 or not slice_keeps_all(node):
        return False
    axis = constant_values(node.input_value(4))
    return axis is not None and int(axis[0]) in (-1, node.get_input_partial_shape(0).rank.get_length() - 1)


def _only_sdpa_masks(output: ov.Output) -> bool:
    """Whether every reader of ``output`` is an SDPA's mask, directly or through :func:`_all_keys_slice`."""
    targets = list(output.get_target_inputs())
    if not targets:
        return False
    for target in targets:
        node = target.get_node()
        if is_sdpa(node) and target.get_index() == MASK_PORT:
            continue
        sliced = node.output(0).get_target_inputs() if target.get_index() == 0 and _all_keys_slice(node) else ()
        if not sliced or len(sdpa_mask_readers(node.output(0))) != len(sliced):
            return False
    return True


def expand_of(select: ov.Node) -> ov.Node | None:
    """The Broadcast that ``select`` (an SDPA mask's Select) reads as its condition and this rule takes, or None."""
    if select.get_type_name() != "Select" or select.get_attributes().get("auto_broadcast", "numpy") != "numpy":
        return None
    node = select.input_value(0).get_node()
    if node.get_type_name() != "Broadcast" or node.get_input_size() != 2:
        return None
    if node.get_attributes().get("mode") not in ("numpy", "bidirectional"):
        return None
    rank = node.get_input_partial_shape(0).rank
    target = node.get_input_partial_shape(1)
    if rank.is_dynamic or target.is_dynamic or target[0].get_length() != rank.get_length():
        return None
    values = constant_values(node.input_value(1))
    if values is not None and bool(np.all(values == 1)):
        return None
    return node if _only_sdpa_masks(select.output(0)) else None


def expand_candidates(model: ov.Model) -> list[str]:
    """The Selects of ``model`` (friendly names, in order) whose expand this rule leaves to the SDPAs. Reads the
    model; changes nothing."""
    return [node.get_friendly_name() for node in model.get_ordered_ops() if expand_of(node) is not None]


class SDPAMaskExpandElimination(NamedNodesPass):
    """Leave the planned masks' expand to their SDPAs (module docstring). ``self.changed`` lists the Selects."""

    NAME = "SDPAMaskExpandElimination"
    REANALYSES = False   # the masks keep their values; no cache or fusion changes
    DESCRIPTION = ("the SDPA masks' expand to [batch, 1, rows, keys] is left to the SDPAs (two u8 copies of a "
                   "full layer's mask less)")

    def run_on_model(self, model: ov.Model) -> bool:
        for select in model.get_ordered_ops():
            name = select.get_friendly_name()
            if name not in self.names:
                continue
            expand = expand_of(select)
            if expand is None:
                self.refused[name] = "its mask is no longer an expanded condition that only SDPAs read"
                continue
            rank = expand.get_input_partial_shape(0).rank.get_length()
            own = ops.broadcast(expand.input_value(0), ops.constant(np.ones(rank, np.int64)),
                                broadcast_spec="BIDIRECTIONAL")
            own.set_friendly_name(expand.get_friendly_name() + SUFFIX)
            copy_runtime_info(expand, own)
            select.input(0).replace_source_output(own.output(0))
            self.changed.append(name)
            log.debug("%s: the mask %s keeps its condition's shape", self.NAME, name)
        if self.changed:
            model.validate_nodes_and_infer_types()
        return bool(self.changed)


__all__ = ["SDPAMaskExpandElimination", "expand_candidates", "expand_of"]
