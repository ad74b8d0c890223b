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

A second run leaves an SDPA that is already behind a barrier alone, also when the model was saved
and read back in between: :func:`is_fusion_barrier` recognises a barrier from what an IR file keeps.
"""

from __future__ import annotations

import logging

import numpy as np
import openvino as ov
from openvino import opset13 as ops
from openvino.passes import AnyInput, Matcher, MatcherPass, Or, WrapType

from ovpasses._ov import copy_runtime_info
from ovpasses.rules import NodePredicate, Rule
from ovpasses.step import refusing

log = logging.getLogger(__name__)

RT_BARRIER = "ovpasses_fusion_barrier"
BARRIER_SUFFIXES = ("/key_fusion_barrier", "/value_fusion_barrier")   # after the SDPA's friendly name

def is_fusion_barrier(node: ov.Node) -> bool:
    """Whether ``node`` is a barrier that this pass inserted, in memory or read back from an IR file.

    In memory a barrier carries :data:`RT_BARRIER` in its runtime info. OpenVINO's IR writer does not
    serialise arbitrary node runtime info, so a barrier read back from a file is recognised by what the
    file keeps: ``Reshape(x, Constant [0, 0, -1, E], special_zero=True)`` with ``E`` the static last
    dimension of ``x`` (a no-op), named ``"<SDPA name>/key_fusion_barrier"`` or
    ``".../value_fusion_barrier"``. Both the structure and the name are required: an exporter's own
    Reshape of that form is not known to keep the SDPA out of fusion, and a node that only carries
    the name may not be a no-op.
    """
    if RT_BARRIER in node.get_rt_info():
        return True
    if node.get_type_name() != "Reshape" or not node.get_friendly_name().endswith(BARRIER_SUFFIXES):
        return False
    source, target = node.input_value(0), node.input_value(1).get_node()
    if not (node.get_attributes().get("special_zero") and target.get_type_name() == "Constant"
            and _static_head(source)):
        return False
    return target.get_vector().tolist() == [0, 0, -1, source.get_partial_shape()[3].get_length()]


def _static_head(output: ov.Output) -> bool:
    """Rank 4 with a static last dimension: the shapes on which the barrier Reshape is a no-op."""
    shape = output.get_partial_shape()
    return shape.rank.is_static and shape.rank.get_length() == 4 and shape[3].is_static


def refusal(sdpa: ov.Node) -> str | None:
    """Why the barrier does not take ``sdpa`` (None: it does): its Reshape is a no-op only on a rank-4 K/V
    with a static head size, and a K/V already behind a barrier needs none."""
    for port, label in ((1, "K"), (2, "V")):
        source = sdpa.input_value(port)
        if not _static_head(source):
            return f"its {label} is not rank 4 with a static head size (the barrier Reshape would not be a no-op)"
        if is_fusion_barrier(source.get_node()):
            return f"its {label} is behind a fusion barrier already"
    return None


class DisableStatefulSDPAFusion(Rule, MatcherPass):
    """Insert a no-op Reshape on ports 1 and 2 of each SDPA that ``predicate`` accepts.

    :param predicate: ``node -> bool`` choosing the SDPAs to keep out of the stateful fusion.
    """

    NAME = "DisableStatefulSDPAFusion"
    ACTION = "barrier"   # the SDPA action (plan.decisions.Action) it carries out
    REANALYSES = True   # its SDPAs leave the stateful fusion the analyses predict
    DESCRIPTION = ("keeps SDPAs that read a cache off its Assign path out of the CPU stateful SDPA fusion (no-op "
                   "Reshape)")

    def __init__(self, predicate: NodePredicate) -> None:
        MatcherPass.__init__(self)
        self.changed: list[str] = []
        self.refused: dict[str, str] = {}

        q, k, v = AnyInput(), AnyInput(), AnyInput()   # what K and V must be: :func:`refusal`, on the root
        rest = [AnyInput(), AnyInput()]
        accepts = refusing(refusal, self.refused, predicate)
        sdpa_type = "opset13.ScaledDotProductAttention"
        root = Or([WrapType(sdpa_type, [q, k, v] + rest[:n], accepts) for n in range(3)])

        def callback(matcher: Matcher) -> bool:
            pvm = matcher.get_pattern_value_map()
            sdpa = matcher.get_match_root()
            name = sdpa.get_friendly_name()
            for port, label, suffix in ((1, k, BARRIER_SUFFIXES[0]), (2, v, BARRIER_SUFFIXES[1])):
                source = pvm[label]
                head = source.get_partial_shape()[3].get_length()
                barrier = ops.reshape(source, ops.constant(np.array([0, 0, -1, head], np.int64)), special_zero=True)
                barrier.set_friendly_name(f"{name}{suffix}")
                copy_runtime_info(sdpa, [barrier, barrier.input_value(1).get_node()])
                barrier.get_rt_info()[RT_BARRIER] = name
                sdpa.input(port).replace_source_output(barrier.output(0))
            self.changed.append(name)
            log.debug("%s: %s kept out of stateful fusion", self.NAME, name)
            return True

        self.register_matcher(Matcher(root, self.NAME), callback)
