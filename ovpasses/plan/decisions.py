"""Typed decisions: per SDPA, what the pipeline does on a runtime profile and why. Pure over plain data:
:func:`plan_with_reasons` per SDPA (the KV caches). Per sliding-window mask, the decision is the sliding-window
feature's (:func:`ovpasses.features.sliding_window.plan.mask_plan`); what no rewrite mends on the paged path is
the paged-heads feature's (:func:`ovpasses.features.paged_heads.paged_path.paged_warnings`).

A decision is an enum value (:class:`Action`, :class:`Lowered`) and a reason; the sentences a person
reads are rendered at the edge (:mod:`ovpasses.app.render.text`), and the JSON reports carry the enum values.
"""

from __future__ import annotations

from dataclasses import dataclass

from ovpasses._strenum import StrEnum

from ovpasses.analysis import stateful_fusion as why
from ovpasses.analysis.kv_sharing import KVSharingAnalysis
from ovpasses.plan.profiles import RuntimeProfile


class Action(StrEnum):
    """What the pipeline does to one SDPA (its value is what the JSON reports carry). The rule that carries an
    action out declares it (its ``ACTION``): :data:`ovpasses.registry.RULE_OF`."""

    NATIVE = "native"                  # nothing: the plugin fuses it as it is
    NATIVE_UNFUSED = "native_unfused"  # nothing: the plugin leaves this shared cache unfused, correctly
    UNANALYSED = "unanalysed"          # nothing: a sub-graph operation also reads its cache
    STATELESS = "stateless"            # nothing: it reads no cache
    SHAPEOF = "shapeof"                # KVCacheShapeOfDecomposition on its cache Concat's ShapeOf
    BARRIER = "barrier"                # DisableStatefulSDPAFusion keeps it out of stateful fusion
    DECOMPOSE = "decompose"            # ScaledDotProductAttentionDecomposition, where the barrier cannot go
    UNSHARED = "unshared"              # kv_sharing="unshare" gave it a cache of its own
    BOUNDED = "bounded"                # sliding_window="bounded" bounded its cache
    TRIMMABLE = "trimmable"            # sliding_window="trimmable": its cache may be trimmed by the program

    @property
    def changes(self) -> bool:
        """Whether the action changes the model (False: the SDPA is left as it is)."""
        return self not in (Action.NATIVE, Action.NATIVE_UNFUSED, Action.UNANALYSED, Action.STATELESS)


class Lowered(StrEnum):
    """What became of one operation the target runtime cannot read (see :mod:`ovpasses.features.old_runtimes.plan`)."""

    CONSTANT_FOLDED = "constant_folded"   # replaced by its value
    CONVERTED = "converted"               # replaced by older operations that compute the same
    REPLACED = "replaced"                 # gone, though no lowering pass claims it
    REFUSED = "refused"                   # still there: the target cannot read the model


@dataclass(frozen=True)
class Decision:
    """What the pipeline plans for one SDPA, and why (the reason comes from the predicate that decided).
    ``not_applied`` names the pass that carries the action out when ``passes=`` left it out: the SDPA is
    then left as it is."""

    action: Action
    reason: str
    not_applied: str | None = None


def plan_with_reasons(analysis: KVSharingAnalysis, profile: RuntimeProfile) -> dict[str, Decision]:
    """Per SDPA (friendly name), what the pipeline does on ``profile`` and why. Pure: reads the analysis only.

    * A cache that some reader reaches off the Assign's path (its own Gather/Concat on the ReadValue)
      crashes when its owner is fused (measured on 2026.0.0 and 2026.4.1 with the builder's
      ``borrow_path="own_concat"``): all its readers are kept out of fusion.
    * A cache that a sub-graph operation (Loop, TensorIterator, If) also reads is left as it is: the
      analysis does not see into the body, so it assumes nothing about that reader. Measured on
      2026.0.0 and 2026.4.1 with ``build_cache_loop`` (the Loop on the cache Concat, on the Gather
      or on the ReadValue): the plugin does not fuse such an SDPA and the graph runs correctly. When
      the cache also has an off-path SDPA reader, the barrier comes first: it mends the known crash
      and only keeps SDPAs out of fusion, the conservative direction.
    * A cache read by several SDPAs through the one Concat is never fused by the plugin (its Concat
      has too many consumers) and decodes correctly on every runtime: nothing to do. Keeping it out
      of fusion by other means would break openvino_genai's PagedAttention conversion.
    * On affected runtimes, a ShapeOf on an exclusive cache's Concat makes the fused kernel lose its
      state; computing that shape from the Concat inputs keeps the cache fused and whole.

    Each condition is a predicate of :mod:`ovpasses.analysis.stateful_fusion` that returns its reason;
    the fusion prediction asks the same predicates.
    """
    decisions: dict[str, Decision] = {}
    for name in analysis.sdpa:
        if reason := why.reads_no_cache(analysis, name):
            decisions[name] = Decision(Action.STATELESS, reason)
        elif reason := why.off_path_reader(analysis, name):
            decisions[name] = Decision(Action.BARRIER, reason)
        elif reason := why.unanalysed_reader(analysis, name):
            decisions[name] = Decision(Action.UNANALYSED, reason)
        elif reason := why.shared_concat(analysis, name):
            decisions[name] = Decision(Action.NATIVE_UNFUSED, reason)
        elif (reason := why.concat_shapeof(analysis, name)) and profile.decompose_cache_shapeof:
            decisions[name] = Decision(Action.SHAPEOF, f"{reason}: on this runtime the fused kernel loses its state to it")
        else:
            decisions[name] = Decision(Action.NATIVE, "exclusive cache" + (f"; {reason}, which this runtime handles"
                                                                    if reason else ""))
    return decisions


def plan(analysis: KVSharingAnalysis, profile: RuntimeProfile) -> dict[str, Action]:
    """Per SDPA (friendly name), what the pipeline does on ``profile``: the actions of
    :func:`plan_with_reasons`. Pure: reads the analysis only."""
    return {name: decision.action for name, decision in plan_with_reasons(analysis, profile).items()}
