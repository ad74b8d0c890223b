"""Each KV cache's head layout, each attention layer's heads, and the one layout padding gives them all.
Changes nothing.

openvino_genai's continuous batching converts every SDPA that reads a KV cache into a PagedAttention
node whose caches are ``[blocks, Hkv, block size, D]``. The CPU PagedAttention of openvino 2025.2 -
2026.2 keeps one executor per model, keyed by precision only, so layers whose ``(Hkv, D)`` differ run
kernels made for another layer (Gemma 4: sliding layers D 256, full layers 512; 26B/31B also 16 and 4
KV heads). Every layout can be made one exactly (``AttentionHeadPadding``):

* the head size by zero padding Q, K and V to the widest ``D``: ``Q Kᵀ`` is unchanged (the padded
  columns multiply zeros), the padded V columns give zero outputs, sliced off before the output
  projection; the scale stays what the original head size gives (explicit);
* the KV-head count by repeating KV heads to ``Hkv*`` (the least common multiple of every count):
  query head ``h`` of a layer with ``H`` query heads and ``Hkv`` KV heads reads KV head
  ``h // (H / Hkv)``; repeating each KV head ``Hkv* / Hkv`` times in order and grouping
  ``H / Hkv*`` query heads per KV head gives it ``(h // (H / Hkv*)) // (Hkv* / Hkv) = h // (H / Hkv)``,
  the same head. So ``H`` must be a multiple of ``Hkv*`` in every layer.

The graph it is about, per cache variable ``v`` (``k_cache_BHkvSD``)::

    ReadValue(v, init) -> [Convert] -> [Gather(beam_idx)] -> Concat(past, k_new_BHkvLD; axis 2) -> Assign(v)
                                                                 |
                        [Convert] [Unsqueeze -> Broadcast -> Reshape]  (one per reader's query heads)
                                                                 |
                                                    SDPA (port 1 or 2), Q [B, H, L, E]

A cache is taken when :func:`padding_nodes` takes its graph: nothing but the next chain node and
ShapeOf reads the past (ShapeOf nodes on the chain and on the Concat are given the original shape
back), the Concat is rank 4 on axis 2 with static ``Hkv`` and ``D``, and from the Concat only Convert,
Unsqueeze, Broadcast and Reshape lead to the SDPAs' K and V ports and to the Assign (Converts only):
the padding rebuilds that path, so nothing else may read it. A model is padded whole or not at all: one layer left
in another layout is what breaks the kernel, so any refusal refuses the model, and says which cache
or layer and why (:class:`HeadsRefusal`).
"""

from __future__ import annotations

import enum
import math
from collections import Counter
from dataclasses import dataclass, field

import openvino as ov

from ovpasses._ov import KEY_PORT, SDPA_TYPE, VALUE_PORT
from ovpasses.analysis.kv_sharing import KVSharingAnalysis
from ovpasses.analysis.cache_chain import find_cache_chains

# the operations a cache's data may cross on its way to an SDPA's K or V; the padding rebuilds this path
PATH_OPS = frozenset({"Convert", "Unsqueeze", "Broadcast", "Reshape"})


class HeadsRefusal(str, enum.Enum):
    """Why the model's caches are not padded (the JSON carries the value; :data:`HEADS_REFUSALS` the sentence)."""

    NO_CACHE_CHAIN = "no_cache_chain"
    CACHE_GRAPH = "cache_graph"
    NOT_BHKVSD = "not_bhkvsd"
    DYNAMIC_LAYOUT = "dynamic_layout"
    READER_PATH = "reader_path"
    QUERY_LAYOUT = "query_layout"
    NOT_GROUPED = "not_grouped"


HEADS_REFUSALS = {
    HeadsRefusal.NO_CACHE_CHAIN: "no ReadValue -> [Convert] -> [Gather] -> Concat(past, new) chain stores it",
    HeadsRefusal.CACHE_GRAPH: "its graph is not one the padding rebuilds",
    HeadsRefusal.NOT_BHKVSD: "its Concat is not a rank-4 [batch, KV heads, sequence, head size] concatenation "
                             "on axis 2",
    HeadsRefusal.DYNAMIC_LAYOUT: "its KV heads or head size are not static",
    HeadsRefusal.READER_PATH: "something other than Convert, Unsqueeze, Broadcast and Reshape lies between it and "
                              "attention, or reads that path",
    HeadsRefusal.QUERY_LAYOUT: "its query is not a rank-4 [batch, heads, length, head size] tensor with static "
                               "heads and head size",
    HeadsRefusal.NOT_GROUPED: "its query heads are not a multiple of the KV heads every cache would get",
}


@dataclass(frozen=True)
class PaddingRefusal:
    reason: HeadsRefusal
    where: str            # the cache (variable id) or layer that refused
    detail: str = ""

    @property
    def message(self) -> str:
        return f"{self.where}: {HEADS_REFUSALS[self.reason]}" + (f" ({self.detail})" if self.detail else "")

    def to_dict(self) -> dict:
        return {"reason": self.reason.value, "where": self.where, "message": self.message}


@dataclass(frozen=True)
class CacheLayout:
    """One cache's KV heads and head size (None: not static) and its element size in bytes."""

    variable_id: str
    kv_heads: int | None
    head_size: int | None
    element_size: int

    def bytes_per_token(self, kv_heads: int | None = None, head_size: int | None = None) -> int | None:
        """Bytes per position at batch 1, in this layout or in ``(kv_heads, head_size)``."""
        kv_heads, head_size = kv_heads or self.kv_heads, head_size or self.head_size
        return None if kv_heads is None or head_size is None else kv_heads * head_size * self.element_size

    def __str__(self) -> str:
        return f"{self.kv_heads}x{self.head_size}"


@dataclass(frozen=True)
class LayerHeads:
    """One SDPA that reads a cache: its query heads, Q/K head size ``E``, V head size ``Ev`` and caches."""

    name: str
    q_heads: int | None
    head_size: int | None
    v_head_size: int | None
    key_cache: str | None
    value_cache: str | None


@dataclass
class PagedHeads:
    """The result of :func:`analyze_paged_heads`: plain data, one source for the pass and the reports."""

    caches: dict[str, CacheLayout]           # every cache some SDPA reads
    layers: dict[str, LayerHeads]            # every SDPA that reads a cache
    target: tuple[int, int] | None           # (KV heads, head size) every cache gets; None when refused
    refusals: list[PaddingRefusal] = field(default_factory=list)

    @property
    def uniform(self) -> bool:
        """Every cache has one layout already."""
        return len({(c.kv_heads, c.head_size) for c in self.caches.values()}) <= 1

    @property
    def padded(self) -> list[str]:
        """The caches the padding changes (none when refused or uniform)."""
        if self.target is None:
            return []
        return [vid for vid, c in self.caches.items() if (c.kv_heads, c.head_size) != self.target]

    @property
    def changed_layers(self) -> list[str]:
        padded = set(self.padded)
        return [n for n, layer in self.layers.items() if {layer.key_cache, layer.value_cache} & padded]

    def bytes_per_token(self, padded: bool = False) -> int | None:
        """KV-cache bytes per token of context at batch 1, as exported or (``padded``) after the padding."""
        kv_heads, head_size = self.target if padded and self.target else (None, None)
        sizes = [c.bytes_per_token(kv_heads, head_size) for c in self.caches.values()]
        return None if None in sizes else sum(sizes)

    def layouts(self) -> str:
        """``"1x8 in 24 caches, 1x16 in 6 caches"`` (KV heads x head size)."""
        counts = Counter(str(c) for c in self.caches.values())
        return ", ".join(f"{layout} in {n} cache{'s' if n > 1 else ''}" for layout, n in sorted(counts.items()))

    def layer_heads(self) -> list[dict]:
        """Per SDPA that reads a cache: its query heads, its key cache's KV heads, head sizes ``E`` and ``Ev``."""
        return [{"sdpa": name, "q_heads": layer.q_heads,
                 "kv_heads": self.caches[layer.key_cache].kv_heads if layer.key_cache in self.caches else None,
                 "head_size": layer.head_size, "v_head_size": layer.v_head_size} for name, layer in self.layers.items()]

    def to_dict(self) -> dict:
        return {"layouts": self.layouts(), "target": list(self.target) if self.target else None,
                "layers": self.layer_heads(), "padded": self.padded, "changed_layers": self.changed_layers,
                "bytes_per_token": self.bytes_per_token(),
                "bytes_per_token_padded": self.bytes_per_token(padded=True) if self.target else None,
                "refusals": [r.to_dict() for r in self.refusals]}


@dataclass
class PaddingNodes:
    """The nodes of one cache as :func:`padding_nodes` finds them (not plain data: for the pass)."""

    read_value: ov.Node
    concat: ov.Node
    new: ov.Output                                                    # the Concat's second input
    shape_ofs: list[ov.Node] = field(default_factory=list)           # on the chain or the Concat
    readers: list[tuple[ov.Node, int]] = field(default_factory=list)  # (SDPA, port 1 or 2)


def padding_nodes(concat: ov.Node, read_value: ov.Node, new: ov.Output) -> PaddingNodes | str:
    """The nodes of the cache whose chain (:func:`~ovpasses.analysis.cache_chain.find_cache_chains`) ends in ``concat``, or
    why the padding cannot take it (a sentence naming the node). Walks the path from the Concat once,
    iteratively; an edge is a data edge into a node's input 0 (Broadcast and Reshape shape inputs are not
    the cache's data)."""
    found = PaddingNodes(read_value, concat, new)
    chain = [concat.input_value(0).get_node()]
    while chain[-1] is not read_value:
        chain.append(chain[-1].input_value(0).get_node())
    for index, node in enumerate(chain):
        following = chain[index - 1] if index else concat
        for target in node.output(0).get_target_inputs():
            consumer = target.get_node()
            if consumer.get_type_name() == "ShapeOf":
                found.shape_ofs.append(consumer)
            elif consumer is not following or (consumer is concat and target.get_index() != 0):
                return f"{consumer.get_type_name()} '{consumer.get_friendly_name()}' reads the past off the Concat"
    pending = [concat]
    while pending:
        node = pending.pop()
        for target in node.output(0).get_target_inputs():
            consumer, kind = target.get_node(), target.get_node().get_type_name()
            where = f"{kind} '{consumer.get_friendly_name()}'"
            if kind == "ShapeOf" and node is concat:
                found.shape_ofs.append(consumer)
            elif kind == "Assign" and all(n.get_type_name() == "Convert" for n in _back_to(node, concat)):
                continue
            elif kind == SDPA_TYPE and target.get_index() in (KEY_PORT, VALUE_PORT):
                found.readers.append((consumer, target.get_index()))
            elif kind in PATH_OPS and target.get_index() == 0:
                pending.append(consumer)
            else:
                return f"{where} reads it on its way to attention"
    return found


def _back_to(node: ov.Node, concat: ov.Node) -> list[ov.Node]:
    """The nodes from ``node`` back to ``concat`` (first inputs), ``concat`` excluded."""
    out = []
    while node is not concat:
        out.append(node)
        node = node.input_value(0).get_node()
    return out


def _static(shape: ov.PartialShape, index: int) -> int | None:
    """Dimension ``index`` of ``shape`` where it is static; None where it is not, or the rank is dynamic or
    has no such dimension (a rank-3 state read where a rank-4 cache was expected)."""
    if shape.rank.is_dynamic or not -shape.rank.get_length() <= index < shape.rank.get_length():
        return None
    return shape[index].get_length() if shape[index].is_static else None


def analyze_paged_heads(model: ov.Model, analysis: KVSharingAnalysis,
                        concats: list[ov.Node] | None = None) -> PagedHeads:
    """Each cache's layout, each reading SDPA's heads, and the layout padding gives every cache (or why not).

    ``analysis`` is the model's KV-sharing analysis as it is now; ``concats``: its Concat nodes in topological
    order, where the caller has them.
    """
    read = {vid: c for vid, c in analysis.caches.items() if c.sdpa}
    chains = find_cache_chains(model, set(read), "PagedHeads.cache_chain", concats)
    element_types = {v.get_info().variable_id: v.get_info().data_type for v in model.get_variables()}
    caches: dict[str, CacheLayout] = {}
    refusals: list[PaddingRefusal] = []
    readers: dict[str, dict[int, str]] = {}   # SDPA -> port -> variable id
    nodes_by_name: dict[str, ov.Node] = {}
    for vid, cache in read.items():
        element = element_types.get(vid)
        if vid not in chains:
            caches[vid] = CacheLayout(vid, None, None, element.size if element else 0)
            refusals.append(PaddingRefusal(HeadsRefusal.NO_CACHE_CHAIN, vid))
            continue
        concat = chains[vid][0]
        shape = concat.get_output_partial_shape(0)
        caches[vid] = CacheLayout(vid, _static(shape, 1), _static(shape, 3),
                                  (element or concat.get_output_element_type(0)).size)
        if shape.rank.is_dynamic or shape.rank.get_length() != 4 or concat.get_attributes()["axis"] % 4 != 2:
            refusals.append(PaddingRefusal(HeadsRefusal.NOT_BHKVSD, vid, f"Concat shape {shape}"))
            continue
        if None in (caches[vid].kv_heads, caches[vid].head_size):
            refusals.append(PaddingRefusal(HeadsRefusal.DYNAMIC_LAYOUT, vid, f"Concat shape {shape}"))
            continue
        if cache.unanalysed_readers or cache.off_path_readers:
            refusals.append(PaddingRefusal(HeadsRefusal.CACHE_GRAPH, vid, "read by a sub-graph or off its Assign's "
                                                                          "path"))
            continue
        found = padding_nodes(*chains[vid])
        if isinstance(found, str):
            refusals.append(PaddingRefusal(HeadsRefusal.READER_PATH, vid, found))
            continue
        for sdpa, port in found.readers:
            name = sdpa.get_friendly_name()
            nodes_by_name[name] = sdpa
            readers.setdefault(name, {})[port] = vid
    layers: dict[str, LayerHeads] = {}
    for name in analysis.sdpa:
        if name not in readers:
            continue
        sdpa = nodes_by_name[name]
        q = sdpa.get_input_partial_shape(0)
        q_heads, head_size = (_static(q, 1), _static(q, 3)) if q.rank.is_static and q.rank.get_length() == 4 \
            else (None, None)
        layers[name] = LayerHeads(name, q_heads, head_size, _static(sdpa.get_output_partial_shape(0), -1),
                                  readers[name].get(1), readers[name].get(2))
        if None in (q_heads, head_size, layers[name].v_head_size):
            refusals.append(PaddingRefusal(HeadsRefusal.QUERY_LAYOUT, f"layer {analysis.layer(name)}", f"Q {q}"))
    target = None
    if not refusals and caches:
        target = (math.lcm(*(c.kv_heads for c in caches.values())), max(c.head_size for c in caches.values()))
        for name, layer in layers.items():
            if layer.q_heads % target[0]:
                refusals.append(PaddingRefusal(HeadsRefusal.NOT_GROUPED, f"layer {analysis.layer(name)}",
                                               f"{layer.q_heads} query heads, {target[0]} KV heads"))
        if refusals:
            target = None
    return PagedHeads(caches, layers, target, refusals)
