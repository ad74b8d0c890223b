"""UnfusedSDPAExpandRewrite: the GQA expand in front of every SDPA the plan expects the CPU plugin not to fuse,
elided (one KV head) or broadcast once in numpy mode (several): :mod:`ovpasses.passes.gqa_expand`.

Why (measured on 2026.4.1 at Gemma 4 E2B widths, 1 KV head, 8 query heads, plugin defaults): the 22 shared layers
read their owners' caches outside the plugin's stateful kernel, and each of their exported expands copied the
cache 8 times every step (a Multiply by a broadcast of ones). Without them the trimmable form's median decode
step at 4,096 positions went from 144 to 50 ms (``benchmarks/records/2026-11-26-gpt-oss-prefill.md``, "The GQA
expand"), the same greedy tokens and the same fused layers::

    Before:  cache [B, 1, S, D] -> Unsqueeze -> Broadcast(target, bidirectional) -> Reshape -> SDPA (not fused)
    After:   cache [B, 1, S, D] ------------------------------------------------------> SDPA (not fused)
             (several KV heads: Broadcast(u, ShapeOf(u) * [1, 1, rep, 1, 1], numpy) in the same place)

Planned in every mode, last of the rules that change attention (:func:`~ovpasses.features.unfused_expands.plan.expand_part`):
what the earlier rules left unfused is known then. The bounding does the same for the readers of the caches it
bounds; their expands are rebuilt when this rule looks, and a rebuilt expand is not planned again. An SDPA the
plugin fuses keeps its expand: the kernel takes it whole, and a rebuilt one takes the layer out of the kernel.
"""

from __future__ import annotations

import logging

import openvino as ov

from ovpasses._ov import is_sdpa
from ovpasses.passes.gqa_expand import elide_single_head_expand, gqa_expand, numpy_expand, rebuilt
from ovpasses.rules import NamedNodesPass

log = logging.getLogger(__name__)

NO_EXPAND = "no GQA expand (Unsqueeze -> Broadcast -> Reshape) in front of its K or V that it can rebuild"
SHARED = "its expand also feeds an SDPA the plan leaves as it is (the plugin may fuse that one)"


def _validate(model: ov.Model, sdpas: list[ov.Node]) -> None:
    """The SDPAs whose K or V changed, validated again: an SDPA's output is ``[..., query rows, V's head size]``,
    which an elided or rebuilt expand leaves as it was, so nothing past them changes (the new nodes were validated
    when made). Where an output did change after all, the whole model is validated (a 35-layer IR's validation
    cost 13 ms of its rewrite)."""
    for sdpa in sdpas:
        before = (sdpa.get_output_element_type(0), sdpa.get_output_partial_shape(0))
        sdpa.validate_and_infer_types()
        if (sdpa.get_output_element_type(0), sdpa.get_output_partial_shape(0)) != before:
            model.validate_nodes_and_infer_types()
            return


def _readers(node: ov.Node) -> set[ov.Node]:
    """The nodes that read ``node``'s first output."""
    return {target.get_node() for target in node.output(0).get_target_inputs()}


class UnfusedSDPAExpandRewrite(NamedNodesPass):
    """For each planned SDPA (friendly names), its K and V expands elided or rebuilt
    (:mod:`ovpasses.passes.gqa_expand`). ``changed`` lists the SDPAs done; ``refused`` the others, with why."""

    NAME = "UnfusedSDPAExpandRewrite"
    REANALYSES = True    # its SDPAs read their caches through other nodes now
    VALIDATES = True     # the SDPAs it changed, whose outputs stay as they were (_validate)
    DESCRIPTION = ("the GQA expand in front of each SDPA the plugin does not fuse, elided (one KV head) or "
                   "broadcast once")

    def __init__(self, names) -> None:
        super().__init__(names)
        self.inputs = 0   # SDPA inputs changed

    def run_on_model(self, model: ov.Model) -> bool:
        touched = []
        for node in model.get_ordered_ops():
            name = node.get_friendly_name()
            if not is_sdpa(node) or name not in self.names:
                continue
            before = self.inputs
            reasons = [reason for port in (1, 2) if (reason := self._rewrite(node, port))]
            if self.inputs > before:
                touched.append(node)
            if reasons:
                self.refused[name] = reasons[0]
            else:
                self.changed.append(name)
                log.debug("%s: %s reads its K and V without the exported GQA expand", self.NAME, name)
        _validate(model, touched)
        return bool(self.inputs)

    def _rewrite(self, sdpa: ov.Node, port: int) -> str | None:
        """Elide or rebuild the expand in front of ``port``; None when it is done (or was: several SDPAs may read
        one expand), else why not."""
        expand = gqa_expand(sdpa, port)
        if expand is None:
            return None                                  # no expand there (any more)
        if elide_single_head_expand(sdpa, port):         # this SDPA's input only
            self.inputs += 1
            return None
        if rebuilt(expand):
            return None                                  # an earlier reader of the same expand rebuilt it
        _, broadcast, _ = expand
        # a rebuilt Broadcast replaces the node for every reader: each must be planned
        sdpas = {reader for reshape in _readers(broadcast) for reader in _readers(reshape)}
        if any(not is_sdpa(reader) or reader.get_friendly_name() not in self.names
               for reader in sdpas):
            return SHARED
        if numpy_expand(sdpa, port):
            self.inputs += 1
            return None
        return NO_EXPAND
