"""KVCacheShapeOfDecomposition: compute the shape of a KV-cache Concat from the shapes of its inputs.

Why: on openvino 2025.2 - 2026.1 the CPU plugin fuses ReadValue -> Gather -> Concat -> SDPA -> Assign
into one stateful kernel but leaves a ShapeOf that reads the Concat behind. That ShapeOf keeps the
old Concat -> Gather chain alive on the ReadValue, and the fused kernel then starts with no state
("ScaledDotProductAttentionWithKVCache ... has null input states"). Gemma 4 exports have such a ShapeOf
(the GQA expand shape of layer 0's cache, which CSE shares with other layers). Computing the same shape
from the Concat's inputs removes the Concat's extra consumer, so the plugin fuses the cache and the
state stays whole; 2026.2 and newer do the equivalent re-routing themselves.

    Before:                                        After:
      past = Gather(ReadValue, beam_idx)             past = Gather(ReadValue, beam_idx)
      cat  = Concat(past, new, axis)                 cat  = Concat(past, new, axis) -> SDPA, Assign
      ShapeOf(cat) -> consumers                      s = ShapeOf(new)
                                                     ScatterUpdate(s, [axis], s[axis] + ShapeOf(past)[axis])
                                                       -> consumers (takes the ShapeOf's friendly name)

The new ShapeOf reads ``past`` (the Gather output), not the ReadValue: the CPU plugin already folds
ShapeOf(Gather) away before its fusion, and openvino_genai's PagedAttention conversion, which removes
ReadValue and beam_idx, accepts a ShapeOf there but not one on the ReadValue.
"""

from __future__ import annotations

import logging

import numpy as np
import openvino as ov
from openvino import opset13 as ops
from openvino.passes import Matcher, MatcherPass, WrapType

from ovpasses._ov import copy_runtime_info
from ovpasses.analysis.cache_chain import cache_chain_pattern
from ovpasses.rules import Rule, RulePlan

log = logging.getLogger(__name__)


def _feeds_assign(output: ov.Output) -> bool:
    """The Concat's value is stored back into a variable (directly or through Converts)."""
    pending = [output]
    while pending:
        for target in pending.pop().get_target_inputs():
            node = target.get_node()
            if node.get_type_name() == "Assign":
                return True
            if node.get_type_name() == "Convert":
                pending.append(node.output(0))
    return False


class KVCacheShapeOfDecomposition(Rule, MatcherPass):
    """Replace ShapeOf(Concat(past cache, new)) by a shape built from ShapeOf(new) and ShapeOf(past)."""

    NAME = "KVCacheShapeOfDecomposition"
    ACTION = "shapeof"   # the SDPA action (plan.decisions.Action) it carries out
    REANALYSES = True   # the cache Concats lose their ShapeOf readers
    WHOLE_MODEL = True  # every ShapeOf on a cache Concat that an Assign stores, not only the planned SDPAs'
    DESCRIPTION = "affected runtimes (2025.2 - 2026.1): computes a cache Concat's ShapeOf from the Concat inputs"

    @classmethod
    def from_plan(cls, part: RulePlan) -> KVCacheShapeOfDecomposition:
        """Every ShapeOf on a stored cache Concat (the planned SDPAs' among them)."""
        return cls()

    def __init__(self) -> None:
        MatcherPass.__init__(self)
        self.changed: list[str] = []
        self.refused: dict[str, str] = {}

        # a KV cache Concat: two inputs, the first from the variable, the result stored back
        chain = cache_chain_pattern(concat_predicate=_feeds_assign)
        concat, new = chain.concat, chain.new
        shape_of = WrapType("opset3.ShapeOf", concat.output(0))

        def callback(matcher: Matcher) -> bool:
            pvm = matcher.get_pattern_value_map()
            shape_node = pvm[shape_of].get_node()
            concat_node = pvm[concat].get_node()
            # the Concat's input 0 is the past cache whether or not the optional Gather matched
            past_out, new_out = concat_node.input_value(0), pvm[new]
            rank = concat_node.get_output_partial_shape(0).rank
            # the axis must be known to split the shape; every exported KV cache has a static rank
            if not rank.is_static:
                return False
            axis = concat_node.get_attributes()["axis"] % rank.get_length()
            et = shape_node.get_output_element_type(0)
            index = ops.constant(np.array([axis], np.int64))
            zero = ops.constant(np.int64(0))
            new_shape = ops.shape_of(new_out, et.get_type_name())
            past_shape = ops.shape_of(past_out, et.get_type_name())
            length = ops.add(ops.gather(past_shape, index, zero), ops.gather(new_shape, index, zero))
            shape = ops.scatter_update(new_shape, index, length, zero)
            name = shape_node.get_friendly_name()
            for node, suffix in ((new_shape, "new_shape"), (past_shape, "past_shape"), (length, "length")):
                node.set_friendly_name(f"{name}/{suffix}")
            shape.set_friendly_name(name)
            copy_runtime_info(shape_node, [new_shape, past_shape, length, shape,
                                           length.input_value(0).get_node(), length.input_value(1).get_node()])
            shape_node.output(0).replace(shape.output(0))
            self.changed.append(name)
            log.debug("%s: %s now computed from the inputs of %s", self.NAME, name, concat_node.get_friendly_name())
            return True

        self.register_matcher(Matcher(shape_of, self.NAME), callback)
