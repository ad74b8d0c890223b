"""The nodes of one KV cache as the sliding-window rules rewrite them (:func:`cache_nodes`: the chain, the Concat,
the Assign, the GQA broadcasts, the ShapeOfs, the readers), and why a cache is refused (:class:`Refusal`,
:class:`CacheRefusal`). Reads the graph; changes nothing. Which caches the sliding-window modes take:
:mod:`~ovpasses.features.sliding_window.caches`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np
import openvino as ov

from ovpasses._ov import KEY_PORT, SDPA_TYPE, VALUE_PORT
from ovpasses.analysis.cache_chain import variable_id
from ovpasses.analysis.kv_sharing import BOUND_SUFFIX


class Refusal(str, enum.Enum):
    """Why a cache is not bounded (the JSON carries the value; :data:`REFUSALS` the sentence)."""

    FULL_ATTENTION = "full_attention"
    SUBGRAPH_READER = "subgraph_reader"
    OFF_PATH_READER = "off_path_reader"
    NO_ASSIGN = "no_assign"
    SEVERAL_READ_VALUES = "several_read_values"
    NO_CACHE_CONCAT = "no_cache_concat"
    UNSUPPORTED_PATH = "unsupported_path"
    SHAPE_PAST_CONCAT = "shape_past_concat"
    WINDOW_TOO_SMALL = "window_too_small"
    NO_FULL_CACHE = "no_full_cache"
    ALREADY_BOUNDED = "already_bounded"
    ALREADY_TRIMMABLE = "already_trimmable"
    UNFUSED_F16_STATE = "unfused_f16_state"


REFUSALS = {
    Refusal.FULL_ATTENTION: "an SDPA that reads it attends without a sliding-window mask",
    Refusal.SUBGRAPH_READER: "a sub-graph operation (not analysed) also reads it",
    Refusal.OFF_PATH_READER: "an SDPA reads it off the Assign's path (its own Gather/Concat on the ReadValue)",
    Refusal.NO_ASSIGN: "no Assign writes it",
    Refusal.SEVERAL_READ_VALUES: "its variable has several ReadValues",
    Refusal.NO_CACHE_CONCAT: "no ReadValue -> [Convert] -> [Gather] -> Concat(past, new) -> [Convert] -> Assign "
                             "chain stores it",
    Refusal.UNSUPPORTED_PATH: "its path to an SDPA holds an operation the bounding does not know works with "
                              "fewer positions",
    Refusal.SHAPE_PAST_CONCAT: "a ShapeOf reads its data past the Concat (a shape that would change once bounded)",
    Refusal.WINDOW_TOO_SMALL: "its window is smaller than 2: nothing to keep",
    Refusal.NO_FULL_CACHE: "no cache keeps the whole context and the model has no attention_mask and input_ids (or "
                           "inputs_embeds) inputs: nothing would give the past length, the positions and the masks",
    Refusal.ALREADY_BOUNDED: "already bounded (its Assign stores a window of the Concat)",
    Refusal.ALREADY_TRIMMABLE: "already trimmable (an earlier run made it so: the model's runtime info names it)",
    Refusal.UNFUSED_F16_STATE: "an f16 cache whose batch size is dynamic: this runtime's CPU plugin cannot run it "
                               "outside its fused kernel (\"Can not clone with new dims\"); the trimmable mode keeps "
                               "it fused",
}


@dataclass(frozen=True)
class CacheRefusal:
    reason: Refusal
    detail: str = ""

    @property
    def message(self) -> str:
        return REFUSALS[self.reason] + (f" ({self.detail})" if self.detail else "")

    def to_dict(self) -> dict:
        return {"reason": self.reason.value, "message": self.message}


@dataclass
class CacheNodes:
    """The nodes of one cache as :func:`cache_nodes` finds them (not plain data: for the pass)."""

    read_value: ov.Node
    chain: list[ov.Node]             # ReadValue, [Convert], [Gather]: the past, in order
    concat: ov.Node
    new: ov.Output                   # the Concat's second input
    axis: int
    assign: ov.Node
    stored: ov.Input                 # the Assign's input (through Converts): where a Slice goes
    broadcasts: list[tuple[ov.Node, int]] = field(default_factory=list)   # GQA Broadcast, sequence axis of its output
    shape_ofs: list[ov.Node] = field(default_factory=list)                # ShapeOf on the chain or the Concat
    readers: list[tuple[ov.Node, int]] = field(default_factory=list)      # (SDPA, port)


def cache_nodes(concat: ov.Node, read_value: ov.Node, new: ov.Output) -> CacheNodes | CacheRefusal:
    """The nodes of the cache whose chain ends in ``concat`` (matched by :func:`~ovpasses.analysis.cache_chain.cache_chain_pattern`), or
    why the bounding cannot take it. Walks the Concat's consumers once (iteratively)."""
    chain = [concat.input_value(0).get_node()]
    while chain[-1] is not read_value:
        chain.append(chain[-1].input_value(0).get_node())
    chain.reverse()
    axis = concat.get_attributes()["axis"]
    rank = concat.get_output_partial_shape(0).rank
    if rank.is_dynamic:
        return CacheRefusal(Refusal.UNSUPPORTED_PATH, f"Concat '{concat.get_friendly_name()}' has a dynamic rank")
    rank = rank.get_length()
    axis %= rank
    found = CacheNodes(read_value, chain, concat, new, axis, None, None)   # type: ignore[arg-type]
    stored = [concat]
    while stored:
        for target in stored.pop().output(0).get_target_inputs():
            if target.get_node().get_type_name() == "Convert":
                stored.append(target.get_node())
            elif target.get_node().get_friendly_name().endswith(BOUND_SUFFIX):
                return CacheRefusal(Refusal.ALREADY_BOUNDED)
    for index, node in enumerate(chain):
        following = chain[index + 1] if index + 1 < len(chain) else concat
        for target in node.output(0).get_target_inputs():
            consumer = target.get_node()
            if consumer.get_type_name() == "ShapeOf":
                found.shape_ofs.append(consumer)
            elif consumer != following or (consumer is concat and target.get_index() != 0):
                return CacheRefusal(Refusal.OFF_PATH_READER if consumer.get_type_name() == SDPA_TYPE else
                                    Refusal.UNSUPPORTED_PATH,
                                    f"{consumer.get_type_name()} '{consumer.get_friendly_name()}' reads "
                                    f"'{node.get_friendly_name()}'")
    # the path from the Concat: (output, sequence axis in it or None once unknown, whether an Assign may follow)
    pending: list[tuple[ov.Output, int | None]] = [(concat.output(0), axis)]
    while pending:
        output, seq = pending.pop()
        for target in output.get_target_inputs():
            node = target.get_node()
            kind = node.get_type_name()
            where = f"{kind} '{node.get_friendly_name()}'"
            if kind == "ShapeOf":
                if output.get_node() is not concat:
                    return CacheRefusal(Refusal.SHAPE_PAST_CONCAT, where)
                found.shape_ofs.append(node)
            elif kind == "Assign":
                if found.assign is not None:
                    return CacheRefusal(Refusal.UNSUPPORTED_PATH, f"two Assigns store it ({where})")
                if variable_id(node) != variable_id(read_value):
                    return CacheRefusal(Refusal.UNSUPPORTED_PATH, f"{where} stores it into another variable")
                found.assign, found.stored = node, target
            elif kind == SDPA_TYPE:
                if target.get_index() not in (KEY_PORT, VALUE_PORT):
                    return CacheRefusal(Refusal.UNSUPPORTED_PATH, f"it reaches port {target.get_index()} of {where}")
                found.readers.append((node, target.get_index()))
            elif kind == "Convert":
                pending.append((node.output(0), seq))
            elif kind == "Transpose" and seq is not None and (perm := _constant(node.input_value(1))) is not None:
                pending.append((node.output(0), list(perm.reshape(-1)).index(seq)))
            elif kind == "Unsqueeze" and seq is not None and (axes := _constant(node.input_value(1))) is not None:
                out_rank = node.get_output_partial_shape(0).rank.get_length()
                inserted = sorted(int(a) % out_rank for a in axes.reshape(-1))
                kept = [i for i in range(out_rank) if i not in inserted]
                pending.append((node.output(0), kept[seq]))
            elif kind == "Broadcast" and node.get_input_size() == 2 and target.get_index() == 0 and seq is not None \
                    and node.get_output_partial_shape(0).rank.is_static \
                    and node.get_input_partial_shape(0).rank.is_static \
                    and node.get_input_partial_shape(1).is_static:
                out_seq = seq + node.get_output_partial_shape(0).rank.get_length() - \
                    node.get_input_partial_shape(0).rank.get_length()
                found.broadcasts.append((node, out_seq))
                pending.append((node.output(0), out_seq))
            elif kind == "Reshape" and target.get_index() == 0 and _constant(node.input_value(1)) is not None:
                pending.append((node.output(0), None))
            else:
                return CacheRefusal(Refusal.UNSUPPORTED_PATH, where)
    if found.assign is None:
        return CacheRefusal(Refusal.NO_ASSIGN)
    # the Assign's input comes from the Concat through Converts only (not through the GQA path)
    source = found.stored.get_source_output().get_node()
    while source is not concat:
        if source.get_type_name() != "Convert":
            return CacheRefusal(Refusal.UNSUPPORTED_PATH, f"the Assign stores {source.get_type_name()} "
                                                          f"'{source.get_friendly_name()}'")
        source = source.input_value(0).get_node()
    return found


def _constant(output: ov.Output) -> np.ndarray | None:
    node = output.get_node()
    return node.get_data() if node.get_type_name() == "Constant" else None


def bytes_per_token(concat: ov.Node, axis: int, element_type: ov.Type) -> int | None:
    pshape = concat.get_output_partial_shape(0)
    size = element_type.size
    for index in range(1, pshape.rank.get_length()):   # dim 0 is the batch: counted as 1
        if index == axis:
            continue
        if pshape[index].is_dynamic:
            return None
        size *= pshape[index].get_length()
    return size


