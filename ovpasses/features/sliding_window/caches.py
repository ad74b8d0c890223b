"""Which KV caches only sliding-window attention reads, their window, and whether they can be bounded.
Changes nothing.

A cache that only sliding-window SDPAs read (each with a mask that
:mod:`ovpasses.features.sliding_window.masks` recognises, window ``W``: key ``k`` is seen from query
``q`` when ``k > q - W``) never needs more than its last ``W - 1`` positions at the next step: the
next query is at ``q >= T`` (``T`` positions stored), so it sees keys ``k > T - W``. Such a cache can
be *bounded* (``SlidingWindowKVCacheBounding``): its Assign stores only the last ``keep = W - 1 +
margin`` positions of ``Concat(past, new)``; the SDPA still attends ``Concat(past, new)``, so a
prefill chunk longer than ``W`` stays exact.

The graph it is about, per cache variable ``v`` (``k_cache_BHkvSD``: [batch, KV heads, sequence, head
size]; the sequence axis is the Concat's)::

    ReadValue(v) -> [Convert] -> [Gather(beam_idx)] -> Concat(past, new) -> [Convert] -> Assign(v)
          |                            |                    |
       (ShapeOf)                   (ShapeOf)  --> past length, positions, masks, GQA target shapes
                                                            |
                     [Convert] [Transpose] [Unsqueeze -> Broadcast(target) -> Reshape(constant)]
                                                            |
                                                     SDPA (K or V), mask = sliding-window Select

What the exporter derives from the cache's length (the ShapeOf nodes on the chain from the
ReadValue to the Concat) must keep its value once the cache is bounded: it is re-sourced from a
*reference* cache that still holds the whole context (one no sliding SDPA bounds) or, where every cache
is bounded (Mistral or Phi-3 exports with ``sliding_window``: every layer sliding), from the model's
``attention_mask`` input, whose length is the past plus the new tokens wherever the model runs statefully
(optimum-intel's ``OVModelForCausalLM``, openvino_genai's stateful LLM and VLM pipelines, and the
exporter's own mask reads it so); the past length is that length less the new tokens. What lies on the
path from the Concat to the SDPA must work with fewer positions: it may hold only Convert, Transpose
and Unsqueeze with constant inputs, Broadcast (its target's sequence element is rebuilt from the
layer's own data) and Reshape to a constant shape; a ShapeOf past the Concat, any other operation, or
a Broadcast whose sequence axis cannot be followed (after a Reshape) refuses the cache, and the
refusal says which node. Refusals are typed (:class:`Refusal`) with a detail naming what refused.

A model with no cache that keeps the whole context and no ``attention_mask`` input is refused whole:
nothing would tell the positions and the masks how long the context is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import openvino as ov

from ovpasses.analysis.cache_chain import find_cache_chains
from ovpasses.analysis.kv_memory import HeldPrecision, cache_shape, held_precision
from ovpasses.analysis.kv_sharing import KVSharingAnalysis
from ovpasses.features.sliding_window.cache_nodes import CacheRefusal, Refusal, bytes_per_token, cache_nodes
from ovpasses.features.sliding_window.masks import DistanceWindowMask, SlidingWindowMask
from ovpasses.analysis.stateful_fusion import predict_fusion
from ovpasses.precision import EXACT_CPU_CONFIG

HELD_CONTEXT = 8192   # the context at which the summary gives the KV bytes held


@dataclass(frozen=True)
class BoundedCache:
    """One cache the bounding keeps short: at most ``keep`` positions, for readers of window ``window``."""

    variable_id: str
    window: int                    # the widest window among its readers
    keep: int                      # positions stored at most: window - 1 + margin
    readers: tuple[str, ...]       # SDPA friendly names
    sequence_axis: int             # the Concat axis (non-negative)
    bytes_per_token: int | None    # per position at batch 1 (None: a dynamic dimension)

    def to_dict(self) -> dict:
        return {"variable_id": self.variable_id, "window": self.window, "keep": self.keep,
                "readers": list(self.readers), "sequence_axis": self.sequence_axis,
                "bytes_per_token": self.bytes_per_token}


@dataclass
class SlidingWindowCaches:
    """The result of :func:`analyze_sliding_window_caches`: plain data, one source for the pass and reports."""

    windows: dict[str, int | None]           # per SDPA that reads a cache: its window, None = full attention
    bounded: dict[str, BoundedCache]         # variable id -> the bounding it gets
    refused: dict[str, CacheRefusal]         # variable id -> why it is not bounded
    reference: str | None = None             # the variable the past length is re-sourced from
    margin: int = 0
    cache_bytes_per_token: dict[str, int | None] = field(default_factory=dict)   # every cache variable
    # SDPAs that read a cache and stay out of the plugin's stateful kernel once bounded (their cache is bounded,
    # or predict_fusion refuses them as the model is): the bounding rebuilds their GQA expands
    unfused_readers: tuple[str, ...] = ()
    # every cache variable: ("key" or "value", KV heads, head size), the last dimension the head (None: dynamic)
    cache_shapes: dict[str, tuple[str, int, int] | None] = field(default_factory=dict)
    # the caches the plugin's stateful kernel is expected to take before the bounding (every reader fused)
    fused_caches: tuple[str, ...] = ()
    # how the CPU plugin of the installed runtime holds the caches: under its defaults, and in the exact config
    precisions: tuple[HeldPrecision, ...] = ()
    # where no cache is left whole: the inputs whose lengths (axis 1) are past + new and new
    # (attention_mask, and input_ids or inputs_embeds), from which the past length is computed instead
    context_inputs: tuple[str, str] | None = None

    @property
    def has_sliding_layer(self) -> bool:
        """Whether any SDPA that reads a cache attends through a sliding window."""
        return any(window is not None for window in self.windows.values())

    @property
    def model_refusal(self) -> CacheRefusal | None:
        """Set when no cache can be bounded for a reason of the whole model (:data:`Refusal.NO_FULL_CACHE`)."""
        reasons = {r.reason for r in self.refused.values()}
        return CacheRefusal(Refusal.NO_FULL_CACHE) if Refusal.NO_FULL_CACHE in reasons else None

    def refusal_counts(self) -> dict[Refusal, int]:
        """How many caches were refused for each reason (in the order first met)."""
        counts: dict[Refusal, int] = {}
        for refusal in self.refused.values():
            counts[refusal.reason] = counts.get(refusal.reason, 0) + 1
        return counts

    def kv_bytes(self, context: int, bounded: bool = True) -> int | None:
        """KV-cache bytes at batch 1 after ``context`` positions: every cache, the bounded ones holding at
        most ``keep`` positions (``bounded=False``: as the unmodified model holds them). None: unknown."""
        total = 0
        for vid, per_token in self.cache_bytes_per_token.items():
            if per_token is None:
                return None
            kept = min(context, self.bounded[vid].keep) if bounded and vid in self.bounded else context
            total += per_token * kept
        return total

    def kv_bytes_held(self, context: int, precision: HeldPrecision, bounded: bool = True,
                      trimmed: bool = False) -> int | None:
        """KV-cache bytes at batch 1 after ``context`` positions as the CPU plugin holds them under ``precision``
        (:mod:`ovpasses.analysis.kv_memory`): a cache its stateful kernel takes in the kernel's precision, any
        other (every bounded one) as a plain state, double buffered. ``bounded=False``: without the bounding.
        ``trimmed``: the caches are trimmable (``sliding_window="trimmable"``), just cut to their keep by the
        program: they stay in the kernel, in its precision. None: unknown (a dynamic dimension)."""
        total = 0
        for vid, shape in self.cache_shapes.items():
            if shape is None:
                return None
            kind, heads, head_size = shape
            is_bounded = bounded and vid in self.bounded
            kept = min(context, self.bounded[vid].keep) if is_bounded else context
            total += precision.cache_bytes(kind, heads, head_size, kept,
                                           fused=vid in self.fused_caches and (trimmed or not is_bounded))
        return total

    def _bytes_per_trimmable_position(self, precision: HeldPrecision) -> int | None:
        """Bytes one more position costs in every trimmable cache together, held by the kernel (None: unknown)."""
        total = 0
        for vid in self.bounded:
            shape = self.cache_shapes.get(vid)
            if shape is None:
                return None
            total += precision.cache_bytes(*shape, 1, fused=vid in self.fused_caches)
        return total

    def held_at(self, context: int, trimmable: bool = False) -> list[dict]:
        """Per configuration of :attr:`precisions`: how the caches are held, and their bytes at ``context``
        positions (batch 1) without the bounding (``full``) and with it (``bounded``).

        ``trimmable`` (the caches made trimmable, not bounded): the runtime holds a trimmable cache whole until
        the program trims it, so there is no ``bounded`` figure; instead ``untrimmed`` (= ``full``: a client that
        never trims, openvino_genai, or a whole prompt before the trim after it), ``trimmed`` (each trimmable cache
        at its keep, in the kernel's precision: right after a trim) and ``per_position`` (what each position
        gained between trims adds: a program trimming every K steps after prompt chunks of C holds at most
        ``trimmed + (K - 1 + C) * per_position``)."""
        rows = []
        for p in self.precisions:
            row = dict(p.to_dict(), context=context, full=self.kv_bytes_held(context, p, bounded=False))
            if trimmable:
                row.update(untrimmed=row["full"], trimmed=self.kv_bytes_held(context, p, trimmed=True),
                           per_position=self._bytes_per_trimmable_position(p))
            else:
                row["bounded"] = self.kv_bytes_held(context, p)
            rows.append(row)
        return rows

    def to_dict(self, trimmable: bool = False) -> dict:
        """Plain data; ``trimmable``: the held figures as :meth:`held_at` gives them for trimmable caches."""
        return {"margin": self.margin, "reference": self.reference, "context_inputs": None if self.context_inputs is None else list(self.context_inputs),
                "windows": dict(self.windows),
                "bounded": [b.to_dict() for b in self.bounded.values()],
                "refused": {vid: r.to_dict() for vid, r in self.refused.items()},
                "unfused_readers": list(self.unfused_readers),
                "kv_bytes_held": self.held_at(HELD_CONTEXT, trimmable)}


# ---------------------------------------------------------------------------------------------- the analysis


def sdpa_windows(analysis: KVSharingAnalysis, masks: list[SlidingWindowMask],
                 distance_masks: list[DistanceWindowMask] = ()) -> dict[str, int | None]:
    """Per SDPA that reads a cache, the window of its sliding-window mask (either form), or None (full
    attention)."""
    window_of = {name: mask.window for mask in masks for name in mask.sdpa_direct + mask.sdpa_sliced}
    window_of.update({name: mask.window for mask in distance_masks for name in mask.sdpa})
    return {name: window_of.get(name) for name, info in analysis.sdpa.items() if info.kv_variables}


# the model runtime info TrimmableSlidingWindowKVCache writes: {variable id (as trimmable_key gives it): positions to keep}
RT_TRIMMABLE = "ovpasses_trimmable_sliding_window"


def trimmable_key(vid: str) -> str:
    """A variable id as an rt_info key (the IR writes keys as XML element names: no '.', '/' or ':')."""
    return "v_" + "".join(c if c.isalnum() or c == "_" else f"_{ord(c):02x}_" for c in vid)


def trimmable_caches(model: ov.Model) -> dict[str, int]:
    """The caches :class:`TrimmableSlidingWindowKVCache` made trimmable in ``model`` (an ``ov.Model``, rewritten
    here or read from an IR it wrote): variable id -> positions a trimmer keeps. Empty when none."""
    return _rt_entries(model, RT_TRIMMABLE)


RT_TRIMMABLE_AXES = "ovpasses_trimmable_sliding_window_axes"   # per trimmable cache: its sequence axis


def _rt_entries(model: ov.Model, key: str) -> dict[str, int]:
    """``model``'s runtime info under ``key``: variable id -> int, for the variables the model has."""
    if not model.has_rt_info(key):
        return {}
    keys = {trimmable_key(v.get_info().variable_id): v.get_info().variable_id for v in model.get_variables()}
    found = model.get_rt_info()[key]
    entries = found.astype(dict) if hasattr(found, "astype") else dict(found)
    return {keys[k]: int(v.astype(str) if hasattr(v, "astype") else v) for k, v in entries.items() if k in keys}


def trimmable_axes(model: ov.Model) -> dict[str, int]:
    """The sequence axis of each cache :func:`trimmable_caches` names, where the rewrite recorded it (2 in the
    ``[batch, KV heads, sequence, head size]`` caches optimum-intel writes, 1 in ``[batch, sequence, KV heads, head
    size]`` ones); IRs written before it was recorded have none, and a trimmer takes 2 for them."""
    return _rt_entries(model, RT_TRIMMABLE_AXES)


def analyze_sliding_window_caches(model: ov.Model, analysis: KVSharingAnalysis, masks: list[SlidingWindowMask],
                                  margin: int = 0, distance_masks: list[DistanceWindowMask] = (),
                                  keep_f16_states_fused: bool = False) -> SlidingWindowCaches:
    """Which caches of ``model`` the bounding can keep to ``W - 1 + margin`` positions, and why not the others.

    ``analysis`` and ``masks`` are the model's KV-sharing analysis and its sliding-window masks as found
    now. A cache is bounded when every SDPA that reads it has a sliding-window mask, nothing the analysis
    cannot see reads it, and :func:`cache_nodes` takes its graph; the reference (where the past length is
    read from) is the first cache that is not bounded and has a cache chain. ``keep_f16_states_fused``: the runtime's
    CPU plugin cannot run an f16 state of dynamic batch out of its fused kernel (the profile's
    ``unfused_f16_state_fails``), so such caches are not bounded.
    """
    windows = sdpa_windows(analysis, masks, distance_masks)
    trimmable = trimmable_caches(model)   # made trimmable by an earlier run: a second one would break the trims

    chains = find_cache_chains(model, name="SlidingWindowCaches.cache_chain")
    element_types = {v.get_info().variable_id: v.get_info().data_type for v in model.get_variables()}

    bounded: dict[str, BoundedCache] = {}
    refused: dict[str, CacheRefusal] = {}
    per_token: dict[str, int | None] = {}
    shapes: dict[str, tuple[str, int, int] | None] = {}
    for vid, cache in analysis.caches.items():
        shapes[vid] = None
        if vid in chains:
            concat = chains[vid][0]
            axis = concat.get_attributes()["axis"] % concat.get_output_partial_shape(0).rank.get_length()
            per_token[vid] = bytes_per_token(concat, axis, element_types.get(vid, concat.get_output_element_type(0)))
            if (found := cache_shape(concat, axis)) is not None:
                shapes[vid] = ("key" if cache.key_readers else "value", *found)
        else:
            per_token[vid] = None
        if not cache.sdpa:
            continue
        full = [n for n in cache.sdpa if windows.get(n) is None]
        if vid in trimmable:
            refused[vid] = CacheRefusal(Refusal.ALREADY_TRIMMABLE)
        elif full:
            refused[vid] = CacheRefusal(Refusal.FULL_ATTENTION, f"layer {analysis.layer(full[0])}")
        elif cache.unanalysed_readers:
            refused[vid] = CacheRefusal(Refusal.SUBGRAPH_READER, ", ".join(cache.unanalysed_readers))
        elif cache.off_path_readers:
            refused[vid] = CacheRefusal(Refusal.OFF_PATH_READER, ", ".join(
                f"layer {analysis.layer(n)}" for n in cache.off_path_readers))
        elif cache.assign is None:
            refused[vid] = CacheRefusal(Refusal.NO_ASSIGN)
        elif len(cache.read_values) != 1:
            refused[vid] = CacheRefusal(Refusal.SEVERAL_READ_VALUES)
        elif vid not in chains:
            refused[vid] = CacheRefusal(Refusal.NO_CACHE_CONCAT)
        elif (window := max(windows[n] for n in cache.sdpa)) < 2:
            refused[vid] = CacheRefusal(Refusal.WINDOW_TOO_SMALL, f"window {window}")
        else:
            nodes = cache_nodes(*chains[vid])
            if isinstance(nodes, CacheRefusal):
                refused[vid] = nodes
            elif {n.get_friendly_name() for n, _ in nodes.readers} != set(cache.sdpa):
                refused[vid] = CacheRefusal(Refusal.UNSUPPORTED_PATH, "its readers are not all on its Concat's path")
            elif keep_f16_states_fused and _f16_state_of_dynamic_batch(chains[vid][0], element_types.get(vid)):
                refused[vid] = CacheRefusal(Refusal.UNFUSED_F16_STATE)
            else:
                bounded[vid] = BoundedCache(vid, window, window - 1 + margin, cache.sdpa, nodes.axis, per_token[vid])
    # an SDPA reads K and V of one length: both caches bounded, or neither (and K from a cache)
    changed = True
    while changed:
        changed = False
        for vid in list(bounded):
            for name in bounded[vid].readers:
                reads = analysis.sdpa[name].kv_variables
                other = next((v for v in reads if v not in bounded), None)
                no_key = not any(name in analysis.caches[v].key_readers for v in reads)
                if other is not None or no_key:
                    refused[vid] = CacheRefusal(Refusal.UNSUPPORTED_PATH, (
                        f"layer {analysis.layer(name)} also reads {analysis.cache_label(other)}, which is not bounded"
                        if other is not None else f"layer {analysis.layer(name)} reads its K from no cache"))
                    del bounded[vid]
                    changed = True
                    break
    # the reference: a cache left whole (it holds every position), not one an earlier run bounded
    reference = next((vid for vid in analysis.caches if vid not in bounded and vid in chains
                      and (vid not in refused
                           or refused[vid].reason not in (Refusal.ALREADY_BOUNDED, Refusal.ALREADY_TRIMMABLE))
                      and len(analysis.caches[vid].read_values) == 1), None)
    context_inputs = context_length_inputs(model) if bounded and reference is None else None
    if bounded and reference is None and context_inputs is None:
        for vid in bounded:
            refused[vid] = CacheRefusal(Refusal.NO_FULL_CACHE)
        bounded = {}
    bounded_readers = {name for b in bounded.values() for name in b.readers}
    fused = {name for name in windows if predict_fusion(analysis, name).expected}
    unfused = tuple(name for name in windows if name in bounded_readers or name not in fused)
    fused_caches = tuple(vid for vid, cache in analysis.caches.items() if cache.sdpa and set(cache.sdpa) <= fused)
    try:
        precisions = (held_precision(model), held_precision(model, EXACT_CPU_CONFIG, label="exact"))
    except RuntimeError:   # a runtime without the CPU plugin: the memory as held is not known
        precisions = ()
    return SlidingWindowCaches(windows, bounded, refused, reference if bounded else None, margin, per_token,
                               unfused if bounded else (), shapes, fused_caches, precisions,
                               context_inputs if bounded else None)


def _f16_state_of_dynamic_batch(concat: ov.Node, state_type) -> bool:
    """The cache's state and its Concat are f16 (no Convert between them) and its batch (axis 0) is dynamic."""
    return (state_type == ov.Type.f16 and concat.get_output_element_type(0) == ov.Type.f16
            and concat.get_output_partial_shape(0)[0].is_dynamic)


CONTEXT_INPUT = "attention_mask"
TOKEN_INPUTS = ("input_ids", "inputs_embeds")


def context_length_inputs(model: ov.Model) -> tuple[str, str] | None:
    """The inputs whose lengths on axis 1 are the context (past + new tokens) and the new tokens, or None:
    the exporters' ``attention_mask`` (an integer tensor [batch, past + new]) and ``input_ids`` [batch, new]
    or ``inputs_embeds`` [batch, new, hidden]. The mask's length is what every stateful client feeds
    (optimum-intel builds ``ones(batch, past + new)`` when given none; openvino_genai's stateful pipelines
    extend it by each new token and cut it where they trim the cache), and what the exported mask reads it
    as. Inputs, not a cache's new K: in some exports the new K depends on positions computed from the past
    length, which would then depend on itself."""
    found: dict[str, ov.Output] = {}
    for port in model.inputs:
        shape = port.get_partial_shape()
        for name in (CONTEXT_INPUT, *TOKEN_INPUTS):
            if name in port.get_names() and shape.rank.is_static and shape.rank.get_length() >= 2:
                found.setdefault(name, port)
    tokens = next((name for name in TOKEN_INPUTS if name in found), None)
    if CONTEXT_INPUT not in found or not found[CONTEXT_INPUT].get_element_type().is_integral() or tokens is None:
        return None
    return CONTEXT_INPUT, tokens
