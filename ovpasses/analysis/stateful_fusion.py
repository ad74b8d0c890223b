"""Why the CPU plugin's stateful SDPA fusion takes or leaves each SDPA: reasons, read from the analysis.

The CPU plugin fuses ``ReadValue -> [Convert] -> Gather(beam_idx) -> Concat(past, new) -> [Convert] ->
Assign`` with the SDPA that reads the Concat into one stateful kernel that owns the cache
(``ScaledDotProductAttentionWithKVCache``). Its pattern (``StatefulSDPAFusion``) allows the Concat two
consumers, or three when one is a ShapeOf, and lets the ReadValue feed only Gather, Convert, ShapeOf
and SDPA nodes. Read against :class:`~ovpasses.analysis.KVSharingAnalysis`, that gives these outcomes,
each measured on openvino 2026.0.0 and 2026.4.1 (the fixtures, ``tests/test_fusion_prediction.py``):

* a cache whose Concat feeds several SDPAs is fused with none of them;
* a cache that a sub-graph operation (Loop, TensorIterator, If) also reads is not fused;
* a cache that a borrower reads off the Assign's path (its own Gather/Concat on the owner's
  ReadValue) is fused with its owner, and the borrower, whose Concat no Assign writes, is not fused:
  it is left without state (``null input states``);
* an SDPA behind the fusion barrier, or decomposed, is not fused;
* a bounded sliding-window cache (its Assign stores a Slice of the Concat) is not fused;
* on 2025.2 - 2026.1 a cache Concat with a ShapeOf consumer is fused and then loses its state; a second
  ShapeOf on the Concat keeps it out of fusion on every runtime.

Each predicate below returns the reason, a sentence naming the layers and caches, or None: the plan
(:func:`ovpasses.plan.decisions.plan_with_reasons`) and the prediction (:func:`predict_fusion`) ask the same
predicates, so what a report says about an SDPA is what the pipeline decided from.

What the prediction does not model: the rest of the plugin's pattern (the Gather(beam_idx) on the
cache path, the GQA broadcast forms it recognises, equal Transpose orders on Q, K and V). Graphs the
exporters write have those forms; synthetic graphs may not (``ovpass check`` lists every SDPA where the
compiled model disagrees with the prediction).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ovpasses.analysis.kv_sharing import KVSharingAnalysis


class Fusion(Enum):
    """What the CPU plugin is expected to do with one SDPA (the sentences: ``ovpasses.app.render.text.FUSION_TEXT``)."""

    FUSED = "fused"
    FUSED_AFTER_REWRITE = "fused_after_rewrite"   # fused because the rewrite took the ShapeOf off its Concat
    FUSED_STATE_LOST = "fused_state_lost"         # fused, and a reader of its cache or the kernel loses state
    NOT_FUSED = "not_fused"


@dataclass(frozen=True)
class FusionVerdict:
    """Whether the CPU plugin is expected to fuse one SDPA into its stateful kernel (``outcome``), and why
    (``reason``, without the verdict: it is rendered with it only at the edge, ``ovpasses.app.render.text.fusion_text``)."""

    outcome: Fusion
    reason: str

    @property
    def expected(self) -> bool:
        return self.outcome != Fusion.NOT_FUSED

    def to_dict(self) -> dict:
        return {"expected": self.expected, "outcome": self.outcome.value, "reason": self.reason}


def _layers(analysis: KVSharingAnalysis, names) -> str:
    layers = sorted(analysis.layer(n) for n in names)
    return ("layer " if len(layers) == 1 else "layers ") + ", ".join(map(str, layers))


def _caches(analysis: KVSharingAnalysis, name: str):
    return [analysis.caches[v] for v in analysis.sdpa[name].kv_variables]


def _on_path_readers(cache) -> tuple[str, ...]:
    return tuple(n for n in cache.sdpa if n not in cache.off_path_readers)


def reads_no_cache(analysis: KVSharingAnalysis, name: str) -> str | None:
    """The SDPA reads no KV cache at port 1 or 2."""
    return None if analysis.sdpa[name].kv_variables else "reads no cache"


def off_path_reader(analysis: KVSharingAnalysis, name: str) -> str | None:
    """A cache the SDPA reads is also read by an SDPA off the Assign's path."""
    for cache in _caches(analysis, name):
        if cache.off_path_readers:
            return (f"{analysis.cache_label(cache.variable_id)} is also read off the Assign's path by "
                    f"{_layers(analysis, cache.off_path_readers)} (its own Gather/Concat on the ReadValue)")
    return None


def unanalysed_reader(analysis: KVSharingAnalysis, name: str) -> str | None:
    """A cache the SDPA reads is also read by a sub-graph operation the analysis does not look into."""
    for cache in _caches(analysis, name):
        if cache.unanalysed_readers:
            return (f"{analysis.cache_label(cache.variable_id)} is also read by "
                    f"{', '.join(cache.unanalysed_readers)} (a sub-graph operation, not analysed)")
    return None


def shared_concat(analysis: KVSharingAnalysis, name: str) -> str | None:
    """The Concat of a cache the SDPA reads feeds other SDPAs too (on the Assign's path)."""
    for cache in _caches(analysis, name):
        readers = _on_path_readers(cache)
        if len(readers) > 5 and cache.owner in readers:
            return (f"its cache Concat feeds {len(readers)} SDPAs (layer {analysis.layer(cache.owner)} and "
                    f"{len(readers) - 1} borrowers)")
        if len(readers) > 1:
            return f"its cache Concat feeds {len(readers)} SDPAs ({_layers(analysis, readers)})"
    return None


def concat_shapeof(analysis: KVSharingAnalysis, name: str) -> str | None:
    """A ShapeOf reads the Concat of a cache the SDPA reads."""
    for cache in _caches(analysis, name):
        if cache.concat_shape_consumers:
            many = len(cache.concat_shape_consumers)
            return (f"{'a ShapeOf reads' if many == 1 else f'{many} ShapeOf nodes read'} the Concat of "
                    f"{analysis.cache_label(cache.variable_id)}")
    return None


def several_concat_shapeofs(analysis: KVSharingAnalysis, name: str) -> str | None:
    """More than one ShapeOf reads a cache Concat of the SDPA: the plugin's pattern allows one."""
    for cache in _caches(analysis, name):
        if len(cache.concat_shape_consumers) > 1:
            return (f"{len(cache.concat_shape_consumers)} ShapeOf nodes read the Concat of "
                    f"{analysis.cache_label(cache.variable_id)} (the plugin allows one)")
    return None


def off_path_of_its_own(analysis: KVSharingAnalysis, name: str) -> str | None:
    """The SDPA itself reads a cache off the Assign's path: its own Concat, which no Assign writes."""
    for cache in _caches(analysis, name):
        if name in cache.off_path_readers:
            return (f"it reads {analysis.cache_label(cache.variable_id)} through its own Concat, which no "
                    "Assign writes")
    return None


def bounded_cache(analysis: KVSharingAnalysis, name: str) -> str | None:
    """A cache the SDPA reads is bounded: its Assign stores a Slice of the Concat, which the plugin's
    pattern does not allow (measured on 2026.0.0 and 2026.4.1, tests/test_sliding_window_bounding.py)."""
    for cache in _caches(analysis, name):
        if cache.bounded:
            return (f"{analysis.cache_label(cache.variable_id)} is bounded (its Assign stores a window of the "
                    "Concat; the plugin's stateful pattern allows nothing between Concat and Assign)")
    return None


def predict_fusion(analysis: KVSharingAnalysis, name: str, *, barrier: bool = False, decomposed: bool = False,
                   shapeof_moved: bool = False, shapeof_loses_state: bool = False) -> FusionVerdict:
    """Whether the CPU plugin fuses SDPA ``name`` into its stateful kernel, and why.

    The flags say what stands in the model: ``barrier`` (the SDPA is behind the fusion barrier),
    ``decomposed`` (it is no SDPA any more), ``shapeof_moved`` (KVCacheShapeOfDecomposition computed the
    ShapeOf of its cache Concat from the Concat's inputs) and ``shapeof_loses_state`` (the runtime's
    fused kernel loses its state to such a ShapeOf: the affected profile).
    """
    if decomposed:
        return FusionVerdict(Fusion.NOT_FUSED, "decomposed into MatMul/Softmax, because "
                             + (off_path_reader(analysis, name) or "it was planned for the fusion barrier"))
    if barrier:
        return FusionVerdict(Fusion.NOT_FUSED, "fusion barrier (a reader off the Assign's path: "
                             + (off_path_reader(analysis, name) or "planned") + ")")
    for refuses in (reads_no_cache, unanalysed_reader, off_path_of_its_own, shared_concat, bounded_cache):
        reason = refuses(analysis, name)
        if reason:
            return FusionVerdict(Fusion.NOT_FUSED, reason)
    if not shapeof_moved and (reason := several_concat_shapeofs(analysis, name)):
        return FusionVerdict(Fusion.NOT_FUSED, reason)
    borrower_loses_state = off_path_reader(analysis, name)
    if borrower_loses_state:
        return FusionVerdict(Fusion.FUSED_STATE_LOST, f"{borrower_loses_state}: that reader is left without state "
                                                      "('null input states')")
    shapeof = concat_shapeof(analysis, name)
    if shapeof and shapeof_moved:
        return FusionVerdict(Fusion.FUSED_AFTER_REWRITE, "the ShapeOf on its Concat is computed from the inputs")
    if shapeof and shapeof_loses_state:
        return FusionVerdict(Fusion.FUSED_STATE_LOST, f"{shapeof}: on this runtime the fused kernel then loses its "
                                                      "state ('null input states')")
    if shapeof:
        return FusionVerdict(Fusion.FUSED, "exclusive cache; the one ShapeOf on its Concat is allowed")
    return FusionVerdict(Fusion.FUSED, "exclusive cache, its Concat has no other consumer")
