"""SDPAReleasePoints: each SDPA's output passes through a Slice of all its rows whose stop is read from its shape, a
sync point of the CPU plugin right after the SDPA, so that the tensors alive across earlier sync points end with
their layer (``sliding_window="trimmable"``; issue 32).

Why: with dynamic shapes the CPU plugin keeps a tensor that is alive across a sync point (a node whose output shape
is read from input values: a Slice with computed bounds, a Range, ...) until the next sync point after its last
reader, or to the end of the graph after the last one (``MemoryManageNonOverlapingSets``; runtime notes in
``docs/runtimes.md``). The trimmable form's narrowed masks and the blocked first prompt's runs are such sync
points; the tensors alive across them (a layer's mask, Q, K and V, the residual) were kept to the next far sync
point or the graph's end, each holding one of the plugin's memory groups, and the later layers' large tensors (a
MoE's ``[experts, tokens, hidden]``) took more groups. With a sync point after every SDPA they end with their
layer. Measured at gpt-oss-20b widths fed whole, peak RSS against the unmodified model's 3,999 / 6,188 MiB at 4k /
8k: trimmable 4,032 / 6,286 -> 3,935 / 6,091, blocked first prompt 4,161 / 6,320 -> 3,942 / 5,876 (16k 10,814 ->
9,924 against 11,074); Gemma 3 4B widths trimmable 4k / 8k / 16k 0.990x / 0.982x / 0.962x (16k was 1.0007x). The
same points lower the unmodified model too (3,827 / 5,845): the effect is the plugin's, not the window's, and this
mode takes it. Their cost is a decode step: 0.0-0.5 ms at those widths, about 3 ms (6%) at Gemma 4 E2B widths (35
SDPAs) for 0.6% of memory; a program that wants the step back leaves the pass out (``passes=``; record
2026-11-27-release-points.md).

    Before:  SDPA -> out                      After:  SDPA -> Slice(axis 2, 0 .. Gather(ShapeOf(SDPA), 2)) -> out

The Slice keeps every row: the outputs are unchanged. An SDPA whose output already ends in a sync point of this
rule (a second run, or the IR read back) or of the blocked first prompt's layers is not planned.
"""

from __future__ import annotations

import logging

import numpy as np
import openvino as ov
from openvino import opset8

from ovpasses._ov import constant_values, is_sdpa
from ovpasses.rules import NamedNodesPass

log = logging.getLogger(__name__)

RT_RELEASE = "ovpasses_release_point"   # on the Slice: the SDPA it follows
SUFFIX = "/release_point"
ROWS = 2                                # the rows axis of an SDPA's output [batch, heads, rows, size]


def release_candidates(model: ov.Model, skip: frozenset[str] = frozenset()) -> list[str]:
    """The SDPAs of ``model`` (friendly names, in order) that get a release point: all but those in ``skip`` and
    those whose output feeds a release point already. Reads the model; changes nothing."""
    names = []
    for node in model.get_ordered_ops():
        if not is_sdpa(node) or node.get_friendly_name() in skip:
            continue
        if node.get_output_partial_shape(0).rank.get_length() != 4:
            continue
        if any(is_release_point(t.get_node(), node) for t in node.output(0).get_target_inputs()):
            continue
        names.append(node.get_friendly_name())
    return names


def _holds(output: ov.Output, value: int) -> bool:
    values = constant_values(output)
    return values is not None and values.tolist() == [value]


def is_release_point(node: ov.Node, sdpa: ov.Node) -> bool:
    """Whether ``node`` is a release point of ``sdpa``: ``Slice(out, 0, Gather(ShapeOf(out), 2), 1, axis 2)`` on its
    output (read from the structure: node runtime info does not survive an IR written and read back)."""
    if node.get_type_name() != "Slice" or node.get_input_size() != 5 or node.input_value(0).get_node() != sdpa:
        return False
    if not (_holds(node.input_value(1), 0) and _holds(node.input_value(3), 1) and _holds(node.input_value(4), ROWS)):
        return False
    stop = node.input_value(2).get_node()
    if stop.get_type_name() != "Gather" or not _holds(stop.input_value(1), ROWS):
        return False
    shape = stop.input_value(0).get_node()
    return shape.get_type_name() == "ShapeOf" and shape.input_value(0).get_node() == sdpa


class SDPAReleasePoints(NamedNodesPass):
    """Put a release point after each planned SDPA (module docstring). ``self.changed`` lists the SDPAs."""

    NAME = "SDPAReleasePoints"
    REANALYSES = False   # no cache, mask or fusion changes: the SDPA keeps its inputs and its kernel
    DESCRIPTION = ("a sync point after each SDPA (a Slice of all its rows), so the CPU plugin frees what crossed "
                   "earlier sync points with the layer")

    def run_on_model(self, model: ov.Model) -> bool:
        i64 = lambda v: opset8.constant(np.array([v], np.int64))  # noqa: E731
        for node in model.get_ordered_ops():
            name = node.get_friendly_name()
            if not is_sdpa(node) or name not in self.names:
                continue
            out = node.output(0)
            targets = list(out.get_target_inputs())
            rows = opset8.gather(opset8.shape_of(out, "i64"), i64(ROWS), opset8.constant(np.int64(0)))
            cut = opset8.slice(out, i64(0), rows, i64(1), i64(ROWS))
            cut.set_friendly_name(name + SUFFIX)
            cut.get_rt_info()[RT_RELEASE] = name
            for target in targets:
                target.replace_source_output(cut.output(0))
            self.changed.append(name)
            log.debug("%s: a release point after %s", self.NAME, name)
        return bool(self.changed)


__all__ = ["RT_RELEASE", "SDPAReleasePoints", "is_release_point", "release_candidates"]
