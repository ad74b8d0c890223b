"""ConvertOneHot16ToOneHot1: OneHot-16 as the OneHot-1 that computes the same, for runtimes without it.

Why: openvino 2025.2's opset16 does not hold OneHot (``Opset opset16 doesn't contain the operation with
type: OneHot``; measured, see :mod:`ovpasses.plan.runtimes`), so an IR that a newer OpenVINO wrote with a
OneHot-16 cannot be read there. OneHot-16 differs from OneHot-1 only by ``negative_indices_mode``; the
specification says that with ``ignore_negative`` it "behaves exactly as OneHot-1", and ``normalize``
maps an index ``i`` in ``[-depth, -1]`` to ``depth + i`` before the same selection. Both are exact in
OneHot-1 and opset1 operations:

    Before:                                      After (ignore_negative):
      OneHot-16(indices, depth, on, off, axis)     OneHot-1(indices, depth, on, off, axis)

                                                 After (normalize):
                                                   i = Select(Less(indices, 0), Add(indices, depth'), indices)
                                                   OneHot-1(i, depth, on, off, axis)
                                                   (depth' = ConvertLike(depth, indices))

An index below ``-depth`` stays negative after the Add, and OneHot-1 gives ``off_value`` for it, as
OneHot-16 does. The new OneHot-1 takes the OneHot-16's friendly name and runtime info.
"""

from __future__ import annotations

import logging

import numpy as np
import openvino as ov
from openvino import opset1
from openvino.passes import AnyInput, Matcher, MatcherPass, WrapType

from ovpasses._ov import copy_runtime_info
from ovpasses.plan.decisions import Lowered
from ovpasses.step import refusing
from ovpasses.rules import NodePredicate, Rule, RulePlan

log = logging.getLogger(__name__)

MODES = ("ignore_negative", "normalize")


def refusal(one_hot: ov.Node) -> str | None:
    """Why :class:`ConvertOneHot16ToOneHot1` does not convert the OneHot-16 ``one_hot``, or None when it
    does: the predicate of its pattern. The pattern takes every mode the specification defines, so only
    an unknown ``negative_indices_mode`` is refused."""
    if one_hot.get_attributes().get("negative_indices_mode") in MODES:
        return None
    return f"its negative_indices_mode is not one of {', '.join(MODES)}"


class ConvertOneHot16ToOneHot1(Rule, MatcherPass):
    """Replace each OneHot-16 by OneHot-1 (with the index normalisation of ``normalize`` mode in opset1 ops).

    :param predicate: ``node -> bool`` choosing the OneHot-16 nodes to convert (default: all). ``refused``
        maps each chosen OneHot-16 that the pattern refused (friendly name) to :func:`refusal`'s reason.
    """

    NAME = "ConvertOneHot16ToOneHot1"
    # no REANALYSES: it replaces operations that only the op-version analysis reads, and the outcomes of the
    # lowering are told against that analysis as it was before the first lowering rule
    DESCRIPTION = ("targets before 2025.4: OneHot-16 as the OneHot-1 (and opset1 index arithmetic) that computes the "
                   "same")
    OPS = (("OneHot", "opset16"),)
    ACTION = Lowered.CONVERTED
    ACTION_REASON = "OneHot-1, which computes the same"

    @classmethod
    def from_plan(cls, part: RulePlan) -> ConvertOneHot16ToOneHot1:
        """The operations the target cannot read (the plan's predicate)."""
        return cls(part.data)

    def __init__(self, predicate: NodePredicate | None = None) -> None:
        MatcherPass.__init__(self)
        self.changed: list[str] = []
        self.refused: dict[str, str] = {}

        def chosen(node: ov.Node) -> bool:   # the type name matches OneHot-1 too: the version tells them apart
            return node.get_type_info().version_id == "opset16" and (predicate is None or predicate(node))

        indices, depth, on, off = AnyInput(), AnyInput(), AnyInput(), AnyInput()
        one_hot = WrapType("opset16.OneHot", [indices, depth, on, off], refusing(refusal, self.refused, chosen))

        def callback(matcher: Matcher) -> bool:
            pvm = matcher.get_pattern_value_map()
            node = pvm[one_hot].get_node()
            attrs = node.get_attributes()
            index = pvm[indices]
            new_nodes: list[ov.Node] = []
            if attrs["negative_indices_mode"] == "normalize":
                zero = opset1.constant(np.array(0, index.get_element_type().to_dtype()))
                shifted = opset1.add(index, opset1.convert_like(pvm[depth], index))
                normalised = opset1.select(opset1.less(index, zero), shifted, index)
                new_nodes += [zero, shifted.input_value(1).get_node(), shifted, normalised.input_value(0).get_node(),
                              normalised]
                index = normalised.output(0)
            replacement = opset1.one_hot(index, pvm[depth], pvm[on], pvm[off], attrs["axis"])
            name = node.get_friendly_name()
            replacement.set_friendly_name(name)
            for made, suffix in zip(new_nodes, ("zero", "depth", "shifted", "negative", "indices")):
                made.set_friendly_name(f"{name}/{suffix}")
            copy_runtime_info(node, [*new_nodes, replacement])
            node.output(0).replace(replacement.output(0))
            self.changed.append(name)
            log.debug("%s: %s (%s) now OneHot-1", self.NAME, name, attrs["negative_indices_mode"])
            return True

        self.register_matcher(Matcher(one_hot, self.NAME), callback)
