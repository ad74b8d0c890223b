"""DisableStatefulSDPAFusion: keep chosen SDPAs out of the CPU plugin's stateful SDPA fusion.

Why: the CPU plugin fuses ReadValue -> [Convert] -> Gather -> Concat -> [GQA broadcast] -> SDPA with
its Assign into one stateful kernel that owns the cache. When another SDPA reads the same cache
through a path the plugin does not recognise (its own Gather/Concat on the same ReadValue, for
example), fusing the owner leaves the other reader without state. This pass puts a no-op Reshape
on the SDPA's K and V inputs. The fusion pattern allows nothing there, so the SDPA stays an ordinary
SDPA; unlike decomposition it stays an SDPA, so openvino_genai's PagedAttention conversion and the
plugin's own SDPA kernels still apply.

    Before:                                       After:
      cache -> ... -> K --+                         cache -> ... -> K -> Reshape(K, [0, 0, -1, E], special_zero)
      cache -> ... -> V --+--> SDPA                 cache -> ... -> V -> Reshape(V, [0, 0, -1, Ev], special_zero)
                Q --------+                                        Q ------------------------------+--> SDPA

The Reshape is a no-op for rank-4 K/V with a static last dimension (the head size), which the pattern
requires. Measured on openvino 2025.2, 2026.0 and 2026.4.1: such a Reshape survives the plugin's
simplifications (a Convert to the same type, Multiply by 1, Add 0, a full slice or an identity
Transpose do not: 2026.x removes them before the fusion runs).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import openvino as ov
from openvino import opset13 as ops
from openvino.passes import AnyInput, Matcher, MatcherPass, Or, WrapType

from ovpasses._ov import copy_runtime_info

log = logging.getLogger(__name__)

RT_BARRIER = "ovpasses_fusion_barrier"

NodePredicate = Callable[[ov.Node], bool]


def _barrier_candidate(output: ov.Output) -> bool:
    """Rank-4 K/V with a static head size, not already behind a barrier."""
    shape = output.get_partial_shape()
    if not (shape.rank.is_static and shape.rank.get_length() == 4 and shape[3].is_static):
        return False
    return RT_BARRIER not in output.get_node().get_rt_info()


class DisableStatefulSDPAFusion(MatcherPass):
    """Insert a no-op Reshape on ports 1 and 2 of each SDPA that ``predicate`` accepts.

    :param predicate: ``node -> bool`` choosing the SDPAs to keep out of the stateful fusion.
    """

    NAME = "DisableStatefulSDPAFusion"

    def __init__(self, predicate: NodePredicate) -> None:
        MatcherPass.__init__(self)
        self.disabled: list[str] = []

        q, k, v = AnyInput(), AnyInput(_barrier_candidate), AnyInput(_barrier_candidate)
        rest = [AnyInput(), AnyInput()]
        accepts = lambda out: predicate(out.get_node())  # noqa: E731
        sdpa_type = "opset13.ScaledDotProductAttention"
        root = Or([WrapType(sdpa_type, [q, k, v] + rest[:n], accepts) for n in range(3)])

        def callback(matcher: Matcher) -> bool:
            pvm = matcher.get_pattern_value_map()
            sdpa = matcher.get_match_root()
            name = sdpa.get_friendly_name()
            for port, label, suffix in ((1, k, "key"), (2, v, "value")):
                source = pvm[label]
                head = source.get_partial_shape()[3].get_length()
                barrier = ops.reshape(source, ops.constant(np.array([0, 0, -1, head], np.int64)), special_zero=True)
                barrier.set_friendly_name(f"{name}/{suffix}_fusion_barrier")
                copy_runtime_info(sdpa, [barrier, barrier.input_value(1).get_node()])
                barrier.get_rt_info()[RT_BARRIER] = name
                sdpa.input(port).replace_source_output(barrier.output(0))
            self.disabled.append(name)
            log.debug("%s: %s kept out of stateful fusion", self.NAME, name)
            return True

        self.register_matcher(Matcher(root, self.NAME), callback)
