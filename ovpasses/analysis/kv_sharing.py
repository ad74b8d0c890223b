"""Which ScaledDotProductAttention nodes read which KV cache: an analysis that changes nothing.

The graph it is about, per cache variable ``v`` of a stateful LLM IR::

    ReadValue(v) -> [Convert] -> [Gather(beam_idx)] -> Concat(past, new) -> [Convert] [Slice] -> Assign(v)
                                                            |
                        +-----------------------------------+------------------+
                        |                                   |                  |
        [Transpose] [Unsqueeze -> Broadcast -> Reshape]  (same, layer j)    ShapeOf -> past length
                        |                                   |
                  SDPA (port 1 or 2)                  SDPA (port 1 or 2)

``[Slice]`` is the window a bounded sliding-window cache stores (``SlidingWindowKVCacheBounding``,
recognised by its friendly name): the cache is still the Concat's, and ``CacheInfo.bounded`` says so.

An SDPA *reads* cache ``v`` when a path of cache edges leads from ``ReadValue(v)`` into its port 1
(K) or port 2 (V). A *cache edge* carries the cache's own elements: it enters the data input of an
operation that moves, selects or retypes elements (:data:`CACHE_PATH_OPS`: Convert, Gather by beam,
Concat with the new K or V, the layout ops and the GQA Unsqueeze / Broadcast / Reshape an exporter puts
before the SDPA), or a sub-graph operation (below). Anything that computes with the data (MatMul,
Convolution, an activation, an Add into the hidden states) ends the cache's path: what comes out is
the layer's output, not the cache. The walk does not cross ShapeOf (a shape-only consumer reads no
cache data), it stops at every SDPA (ports 0, 3 and 4 are Q, mask and scale, not cache reads) and at
Assign and Result.

A *KV cache* is a variable that some SDPA reads so, or whose Assign stores the whole Concat(past, new)
of its own path (a cache that grows with the context, read by attention that is not an SDPA: an eager
export, a decomposed SDPA); every other variable is a *state* that is not a KV cache (:class:`StateInfo`: the conv, SSM and linear-attention states of hybrid models, whose
ReadValue feeds a convolution or a scan whose output joins the hidden states and so reaches the K and
V projections of every later attention layer, through a MatMul)::

    ReadValue(conv) -> Gather(beam_idx) -> Concat(past, x) -> Convolution -> ... -> MatMul(out_proj) -> + hidden
                                                 +-> Slice -> Assign(conv)        (not a KV cache: the
                                                                                   MatMul ends its path)
    hidden -> MatMul(k_proj) -> ... -> Concat(past_k, new) -> SDPA (port 1)      (the KV cache's own path)

Sub-graph operations (Loop, TensorIterator, If) are not looked into, and what cannot be seen into
makes the verdict conservative, never ``exclusive``. A sub-graph operation that a KV cache's data enters,
or whose body reads or writes the same variable (a ReadValue or Assign of its id), is an
*unanalysed reader* of that cache (``CacheInfo.unanalysed_readers``): the cache counts as shared,
so every SDPA that reads it is ``shared``. The walk still follows the operation's outputs, so an
SDPA that reads cache data through a Loop is a reader of that cache. Each such operation, and each
one whose body holds ReadValue, Assign or SDPA nodes, is reported in ``unhandled`` with the caches
and SDPAs it affects (:mod:`ovpasses.analysis.subgraphs`). A Loop that carries a state no SDPA reads
(a hybrid model's own scan) is the model's computation, not a reader of a KV cache: it is not reported.

    ReadValue(v) -> Concat(past, new) -> Assign(v)
                          |
                          +--> SDPA            exclusive without the Loop; shared with it
                          +--> Loop { body: reads the cache, not analysed }

Per SDPA the verdict is ``stateless`` (reads no cache), ``exclusive`` (every cache it reads has no
other reader) or ``shared`` (some cache it reads is read by another SDPA too, or by an unanalysed
reader). Per cache, the *owner* is the SDPA of the layer whose Concat feeds the Assign: the first
SDPA, in topological order, that reads the cache through the node that feeds the Assign; the other
SDPA readers are borrowers.

The walk is one multi-source pass: it propagates sets of variable ids in topological order over the
part of the graph that cache data reaches, visiting each node of that part once.
"""

from __future__ import annotations

import logging
import re
from collections import deque
from dataclasses import replace

import openvino as ov

from ovpasses._ov import KEY_PORT, SDPA_TYPE, VALUE_PORT
from ovpasses.analysis.cache_chain import variable_id
from ovpasses.analysis.kv_caches import (  # noqa: F401 - the analysis's result, re-exported where it is made
    RT_OWNER_OF,
    RT_STATUS,
    RT_VARIABLES,
    CacheInfo,
    KVSharingAnalysis,
    SDPAInfo,
    Status,
)
from ovpasses.analysis.states import states_of
from ovpasses.analysis.subgraphs import SUBGRAPH_OPS, body_contents, unhandled_messages
from ovpasses.errors import UnsupportedModelError

log = logging.getLogger(__name__)

SHAPE_ONLY = {"ShapeOf"}
STOP = {"Assign", "Result"}
# The operations a KV cache's own elements cross between its ReadValue and the SDPA that reads it, each
# through its data input (the input index below; Concat: any): they move, select or retype elements and
# combine them with nothing but more of the cache. Measured on every fixture export (Gemma 2/3/3n/4,
# gpt-oss, Cohere2, EXAONE 4, Mistral) before and after every mode: Gather, Concat, Unsqueeze, Broadcast,
# Reshape (Convert and Transpose in the synthetic stacks); the rest are their kin.
CACHE_PATH_OPS: dict[str, int | None] = {
    "Convert": 0, "Gather": 0, "Concat": None, "Transpose": 0, "Reshape": 0, "Squeeze": 0, "Unsqueeze": 0,
    "Broadcast": 0, "Tile": 0, "Slice": 0, "StridedSlice": 0, "Split": 0, "VariadicSplit": 0,
}
# the friendly-name suffix of the Slice between a bounded cache's Concat and its Assign
BOUND_SUFFIX = "/sliding_window_bound"

def analyze_kv_sharing(model: ov.Model, ordered_ops: list[ov.Node] | None = None) -> KVSharingAnalysis:
    """Walk forward from every ReadValue of ``model`` and report which SDPA reads which cache.

    ``ordered_ops`` is ``model.get_ordered_ops()`` when the caller has it already (one call costs
    about as much as the whole walk on a large model); ``SDPAInfo.order`` indexes into it.
    """
    ordered = model.get_ordered_ops() if ordered_ops is None else ordered_ops
    order: dict[ov.Node, int] = {}
    read_values: list[ov.Node] = []
    anchors: dict[ov.Node, set[str]] = {}   # node feeding an Assign (through Converts) -> variable ids
    assigns: dict[str, str] = {}
    bounded: set[str] = set()               # variables whose Assign stores a window of the Concat
    # sub-graph operation -> variable ids it reads without the walk seeing how (cache data enters it,
    # or its body holds a ReadValue / Assign of the variable); insertion order is topological
    opaque: dict[ov.Node, set[str]] = {}
    holds_state_or_attention: list[ov.Node] = []
    for index, node in enumerate(ordered):
        type_name = node.get_type_name()
        if type_name == SDPA_TYPE:
            order[node] = index
        elif type_name == "ReadValue":
            read_values.append(node)
        elif type_name == "Assign":
            vid = variable_id(node)
            assigns[vid] = node.get_friendly_name()
            source = node.input_value(0).get_node()
            while source.get_type_name() == "Convert" or _bounds_cache(source):
                if _bounds_cache(source):
                    bounded.add(vid)
                source = source.input_value(0).get_node()
            anchors.setdefault(source, set()).add(vid)
        elif type_name in SUBGRAPH_OPS:
            variables, attention = body_contents(node)
            if variables or attention:
                holds_state_or_attention.append(node)
            if variables:
                opaque[node] = set(variables)

    labels: dict[ov.Node, frozenset[str]] = {}
    anchored: dict[ov.Node, frozenset[str]] = {}
    # pass 1: the region cache data reaches and how many of its edges enter each node
    indegree: dict[ov.Node, int] = {}
    queue = deque(read_values)
    seen = set(read_values)
    while queue:
        node = queue.popleft()
        for consumer in _consumers(node):
            if _terminal(consumer.get_node()) or not _carries(consumer):
                continue
            c = consumer.get_node()
            indegree[c] = indegree.get(c, 0) + 1
            if c not in seen:
                seen.add(c)
                queue.append(c)

    # pass 2: propagate variable-id sets in topological order over that region
    readers: dict[ov.Node, dict[str, set[int]]] = {}
    shape_consumers: dict[str, list[str]] = {}
    concat_shape_consumers: dict[str, list[str]] = {}
    rv_names: dict[str, list[str]] = {}
    ends: dict[str, set[str]] = {}          # variable id -> types of the operations that end its paths
    for rv in read_values:
        vid = variable_id(rv)
        labels[rv] = frozenset({vid})
        anchored[rv] = frozenset(anchors.get(rv, ()))
        rv_names.setdefault(vid, []).append(rv.get_friendly_name())
    ready = deque(rv for rv in read_values if indegree.get(rv, 0) == 0)
    while ready:
        node = ready.popleft()
        label, anchor_label = labels[node], anchored[node] | frozenset(anchors.get(node, ()))
        for target in _consumers(node):
            consumer = target.get_node()
            type_name = consumer.get_type_name()
            if type_name == SDPA_TYPE:
                if target.get_index() in (KEY_PORT, VALUE_PORT):
                    ports = readers.setdefault(consumer, {})
                    for vid in label:
                        ports.setdefault(vid, set()).add(target.get_index())
                    for vid in anchor_label:
                        ports.setdefault(("anchored", vid), set()).add(target.get_index())
                continue
            if type_name in SHAPE_ONLY:
                for vid in label:
                    shape_consumers.setdefault(vid, []).append(consumer.get_friendly_name())
                for vid in anchors.get(node, ()):
                    concat_shape_consumers.setdefault(vid, []).append(consumer.get_friendly_name())
                continue
            if type_name in STOP:
                continue
            if not _carries(target):   # it computes with the data: the cache's path ends here
                for vid in label:
                    ends.setdefault(vid, set()).add(type_name)
                continue
            if type_name in SUBGRAPH_OPS:
                opaque.setdefault(consumer, set()).update(label)
            labels[consumer] = labels.get(consumer, frozenset()) | label
            anchored[consumer] = anchored.get(consumer, frozenset()) | anchor_label
            indegree[consumer] -= 1
            if indegree[consumer] == 0:
                ready.append(consumer)

    # a cache that grows (its Assign stores the whole Concat(past, new) of its own path) is a KV cache even
    # where no SDPA reads it: attention computed by MatMuls (an eager export, a decomposed SDPA)
    grows = {vid for node, vids in anchors.items() if node.get_type_name() == "Concat"
             for vid in vids & labels.get(node, frozenset())}
    read = {vid for r in readers.values() for vid in r if isinstance(vid, str)}
    states = states_of(read_values, read | grows, ends, {vid for vids in opaque.values() for vid in vids})
    # a sub-graph operation that carries only states (a hybrid model's scan) reads no KV cache
    opaque = {op: vids - states.keys() for op, vids in opaque.items() if vids - states.keys()}
    return _summarise(order, readers, shape_consumers, concat_shape_consumers, assigns,
                      {vid: names for vid, names in rv_names.items() if vid not in states}, opaque,
                      holds_state_or_attention, bounded, states)


def _summarise(order, readers, shape_consumers, concat_shape_consumers, assigns, rv_names, opaque,
               holds_state_or_attention, bounded, states) -> KVSharingAnalysis:
    by_var: dict[str, list[ov.Node]] = {vid: [] for vid in rv_names}
    for node in sorted(readers, key=order.__getitem__):
        for key in readers[node]:
            if isinstance(key, str):
                by_var[key].append(node)
    unanalysed: dict[str, list[str]] = {}
    for op, variables in opaque.items():
        for vid in variables:
            if vid in rv_names:   # a variable only the body reads is not a cache of this graph
                unanalysed.setdefault(vid, []).append(op.get_friendly_name())
    caches: dict[str, CacheInfo] = {}
    owner_of: dict[ov.Node, list[str]] = {}
    for vid, nodes in by_var.items():
        owner = None
        if vid in assigns:
            owner = next((n for n in nodes if ("anchored", vid) in readers[n]), None)
        if owner is not None:
            owner_of.setdefault(owner, []).append(vid)
        names = tuple(n.get_friendly_name() for n in nodes)
        caches[vid] = CacheInfo(
            variable_id=vid,
            sdpa=names,
            owner=owner.get_friendly_name() if owner is not None else None,
            borrowers=tuple(n.get_friendly_name() for n in nodes if n is not owner),
            key_readers=tuple(n.get_friendly_name() for n in nodes if KEY_PORT in readers[n][vid]),
            value_readers=tuple(n.get_friendly_name() for n in nodes if VALUE_PORT in readers[n][vid]),
            shape_consumers=tuple(shape_consumers.get(vid, ())),
            assign=assigns.get(vid),
            read_values=tuple(rv_names[vid]),
            concat_shape_consumers=tuple(concat_shape_consumers.get(vid, ())),
            off_path_readers=tuple(n.get_friendly_name() for n in nodes
                                   if vid in assigns and ("anchored", vid) not in readers[n]),
            unanalysed_readers=tuple(unanalysed.get(vid, ())),
            bounded=vid in bounded,
        )
    sdpa: dict[str, SDPAInfo] = {}
    for node in sorted(order, key=order.__getitem__):
        read = tuple(sorted(k for k in readers.get(node, {}) if isinstance(k, str)))
        if not read:
            status: Status = "stateless"
        elif any(caches[v].shared for v in read):
            status = "shared"
        else:
            status = "exclusive"
        name = node.get_friendly_name()
        if name in sdpa:
            raise UnsupportedModelError(f"two SDPA nodes share the friendly name '{name}'; ovpasses reports and "
                                        "selects SDPAs by friendly name, so give each SDPA a unique one "
                                        "(node.set_friendly_name) before running it")
        sdpa[name] = SDPAInfo(name=name, kv_variables=read, status=status,
                              owner_of=tuple(owner_of.get(node, ())), order=order[node])
    layers = layer_indices(list(sdpa))
    sdpa = {name: replace(info, layer=layers[name]) for name, info in sdpa.items()}
    unhandled = unhandled_messages(opaque, holds_state_or_attention, {v: c.sdpa for v, c in caches.items()},
                                   {n: s.order for n, s in sdpa.items()})
    for message in unhandled:
        log.warning("analyze_kv_sharing: %s", message)
    return KVSharingAnalysis(caches=caches, sdpa=sdpa, unhandled=unhandled, states=states)


_LAYER_NUMBER = re.compile(r"(?:^|[^A-Za-z0-9])layers?[._/](\d+)(?![0-9])")


def layer_indices(names: list[str]) -> dict[str, int]:
    """The decoder-layer index of each SDPA of ``names`` (in topological order): the number after
    ``layers.`` in the friendly name when every name has one and no two share it
    (``__module.model.layers.4.self_attn/aten::scaled_dot_product_attention/...`` is layer 4), else the
    position among ``names``."""
    found = {}
    for name in names:
        match = _LAYER_NUMBER.search(name)
        if match is None:
            break
        found[name] = int(match[1])
    if len(found) == len(names) and len(set(found.values())) == len(names):
        return found
    return {name: index for index, name in enumerate(names)}


def _bounds_cache(node: ov.Node) -> bool:
    """The Slice with which SlidingWindowKVCacheBounding stores the last positions of a cache Concat."""
    return node.get_type_name() == "Slice" and node.get_friendly_name().endswith(BOUND_SUFFIX)


def _consumers(node: ov.Node):
    for output in node.outputs():
        yield from output.get_target_inputs()


def _carries(target: ov.Input) -> bool:
    """Whether the edge into ``target`` carries a cache's elements on (:data:`CACHE_PATH_OPS`' data input, or
    any input of a sub-graph operation, which the walk does not look into)."""
    type_name = target.get_node().get_type_name()
    if type_name in SUBGRAPH_OPS:
        return True
    if type_name not in CACHE_PATH_OPS:
        return False
    port = CACHE_PATH_OPS[type_name]
    return port is None or target.get_index() == port


def _terminal(node: ov.Node) -> bool:
    type_name = node.get_type_name()
    return type_name == SDPA_TYPE or type_name in SHAPE_ONLY or type_name in STOP

