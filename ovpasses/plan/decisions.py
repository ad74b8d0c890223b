"""Typed decisions: per SDPA and per sliding-window mask, what the pipeline does on a runtime profile and
why. Pure over plain data: :func:`plan_with_reasons` per SDPA (the KV caches), :func:`mask_plan` per
sliding-window mask (openvino_genai's paged path) and :func:`paged_warnings` for what no rewrite mends on
that path (:class:`PagedWarning`: a risk, the option that mends it, the release that fixes it).

A decision is an enum value (:class:`Action`, :class:`MaskAction`) and a reason; the sentences a person
reads are rendered at the edge (:mod:`ovpasses.app.render.text`), and the JSON reports carry the enum values.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ovpasses._strenum import StrEnum

from ovpasses.analysis import stateful_fusion as why
from ovpasses.analysis.attention_heads import AttentionHeads, head_layouts
from ovpasses.analysis.kv_sharing import KVSharingAnalysis
from ovpasses.analysis.sliding_window_masks import SlidingWindowMask
from ovpasses.plan.profiles import RuntimeProfile
from ovpasses.analysis.paged_heads import PaddingRefusal
from ovpasses.modes import OptionChoice, PagedHeads
from ovpasses.plan.runtimes import (
    PAGED_CPU_IGNORES_WINDOW,
    PAGED_CPU_NEEDS_ONE_HEAD_SIZE,
    PAGED_CPU_NEEDS_ONE_QUERY_HEAD_COUNT,
    Version,
    version_string,
)


class Action(StrEnum):
    """What the pipeline does to one SDPA (its value is what the JSON reports carry)."""

    NATIVE = "native"                  # nothing: the plugin fuses it as it is
    NATIVE_UNFUSED = "native_unfused"  # nothing: the plugin leaves this shared cache unfused, correctly
    UNANALYSED = "unanalysed"          # nothing: a sub-graph operation also reads its cache
    STATELESS = "stateless"            # nothing: it reads no cache
    SHAPEOF = "shapeof"                # KVCacheShapeOfDecomposition on its cache Concat's ShapeOf
    BARRIER = "barrier"                # DisableStatefulSDPAFusion keeps it out of stateful fusion
    DECOMPOSE = "decompose"            # ScaledDotProductAttentionDecomposition, where the barrier cannot go
    UNSHARED = "unshared"              # SharedKVCacheUnsharing gave it a cache of its own
    BOUNDED = "bounded"                # SlidingWindowKVCacheBounding bounded its cache

    @property
    def changes(self) -> bool:
        """Whether the action changes the model (False: the SDPA is left as it is)."""
        return self not in (Action.NATIVE, Action.NATIVE_UNFUSED, Action.UNANALYSED, Action.STATELESS)


class MaskAction(StrEnum):
    """What the pipeline does to one sliding-window mask (a Select)."""

    SLICE = "slice"                    # SlidingWindowMaskSliceInsertion: the paged converter reads the window
    SLICED_ALREADY = "sliced_already"  # nothing: read through a Slice already
    NATIVE = "native"                  # nothing: this runtime's paged converter reads the window as it is
    IGNORED = "ignored"                # nothing: this runtime's CPU PagedAttention ignores sliding windows


class Lowered(StrEnum):
    """What became of one operation the target runtime cannot read (see :mod:`ovpasses.lowering`)."""

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


def mask_plan(masks: list[SlidingWindowMask], profile: RuntimeProfile) -> dict[str, MaskAction]:
    """Per sliding-window mask (its Select's friendly name), what the pipeline does on ``profile``. Pure."""
    actions = {}
    for mask in masks:
        if not mask.sdpa_direct:
            actions[mask.select] = MaskAction.SLICED_ALREADY
        elif profile.slice_sliding_window_mask:
            actions[mask.select] = MaskAction.SLICE
        elif profile.paged_cpu_ignores_window:
            actions[mask.select] = MaskAction.IGNORED
        else:
            actions[mask.select] = MaskAction.NATIVE
    return actions


class PagedRisk(str, Enum):
    """What openvino_genai's paged path (CPU PagedAttention) does wrong with a model on a runtime, or what
    ``paged_heads=pad`` does not do there (its value is what the JSON could carry; the sentence is rendered at
    the edge, :func:`ovpasses.app.render.text.paged_warning_text`)."""

    MIXED_HEAD_SIZES = "mixed_head_sizes"      # wrong tokens: the layers' head sizes differ; padding mends it
    MIXED_QUERY_HEADS = "mixed_query_heads"    # wrong tokens: the layers' query-head counts differ; nothing does
    IGNORES_WINDOW = "ignores_window"          # wrong tokens once a sequence outgrows the window; nothing mends it
    PADDING_NOT_NEEDED = "padding_not_needed"  # paged_heads=pad where the runtime does not need it: only a cost
    PADDING_REFUSED = "padding_refused"        # paged_heads=pad needed, and the model refused it


# what mends head sizes that differ on the paged path, short of a newer runtime or the stateful path
PAD_HEADS = OptionChoice("paged_heads", PagedHeads.PAD)


@dataclass(frozen=True)
class PagedWarning:
    """One thing no rewrite mends on openvino_genai's paged path (or that the padding asked for does not do),
    as data: the risk, the runtime, what of the model shows it, the option that mends it (``option``) or
    that it is about, and the first release that mends it (None: none measured)."""

    risk: PagedRisk
    runtime: Version
    layouts: tuple[tuple[str, int], ...] = ()   # (query heads x head size, layers), as the model has them
    windows: tuple[int, ...] = ()               # the sliding layers' windows
    option: OptionChoice | None = None
    fixed_in: Version | None = None
    bytes_per_token: tuple[int | None, int | None] | None = None   # KV bytes per token before, after padding
    refusal: PaddingRefusal | None = None       # why the padding refused the model

    def to_dict(self) -> dict:
        """Plain data (the library's reports carry it; the application renders the sentence)."""
        return {"risk": self.risk.value, "runtime": version_string(self.runtime), "layouts": [list(l) for l in self.layouts],
                "windows": list(self.windows),
                "option": None if self.option is None else {"option": self.option.option,
                                                            "value": self.option.value.value},
                "fixed_in": None if self.fixed_in is None else version_string(self.fixed_in),
                "bytes_per_token": None if self.bytes_per_token is None else list(self.bytes_per_token),
                "refusal": None if self.refusal is None else self.refusal.to_dict()}


def paged_warnings(profile: RuntimeProfile, analysis: KVSharingAnalysis, heads: dict[str, AttentionHeads],
                   masks: list[SlidingWindowMask]) -> list[PagedWarning]:
    """What no rewrite mends on openvino_genai's paged path on ``profile``, for this model. Pure.

    The SDPAs that read a KV cache are the ones the paged path turns into PagedAttention. When the
    runtime's CPU PagedAttention needs one head size (or one query-head count) and they have several,
    it computes garbage whatever the rewrite does, short of padding every cache to the widest head
    (which would grow the stateful model's state as well); when it ignores sliding windows, a model
    with one is wrong once a sequence outgrows the window. Each warning names the ways out as data.
    """
    paged = {n: h for n, h in heads.items() if n in analysis.sdpa and analysis.sdpa[n].status != "stateless" and h.known}
    layouts = tuple((str(layout), count) for layout, count in sorted(head_layouts(paged).items()))
    out = []
    if profile.paged_cpu_one_head_size and len({(h.head_size, h.v_head_size) for h in paged.values()}) > 1:
        out.append(PagedWarning(PagedRisk.MIXED_HEAD_SIZES, profile.version, layouts=layouts, option=PAD_HEADS,
                                fixed_in=PAGED_CPU_NEEDS_ONE_HEAD_SIZE[1]))
    if profile.paged_cpu_one_query_head_count and len({h.q_heads for h in paged.values()}) > 1:
        out.append(PagedWarning(PagedRisk.MIXED_QUERY_HEADS, profile.version, layouts=layouts,
                                fixed_in=PAGED_CPU_NEEDS_ONE_QUERY_HEAD_COUNT[1]))
    if profile.paged_cpu_ignores_window and masks:
        out.append(PagedWarning(PagedRisk.IGNORES_WINDOW, profile.version,
                                windows=tuple(sorted({m.window for m in masks})), fixed_in=PAGED_CPU_IGNORES_WINDOW[1]))
    return out
