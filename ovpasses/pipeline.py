"""The runtime-aware pipeline: detect KV sharing, decide per runtime what to change, change it.

``rewrite(model)`` runs in place and returns a :class:`RewriteSummary`; ``compile_model(model)``
rewrites a clone and hands it to the CPU or GPU plugin. What changes depends on the runtime profile
(see :func:`profile_for` and the table in README.md), chosen from ``openvino.get_version()`` unless
``runtime`` names a release. Three plans, each pure over plain data: :func:`plan` per SDPA (the KV
caches), :func:`mask_plan` per sliding-window mask (openvino_genai's paged path) and
:func:`paged_warnings` for what no rewrite mends on that path.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import openvino as ov
from openvino.passes import Manager

from ovpasses._ov import runtime_version
from ovpasses.analysis.attention_heads import AttentionHeads, attention_heads, head_layouts
from ovpasses.analysis.kv_sharing import KVSharingAnalysis, analyze_kv_sharing
from ovpasses.analysis.sliding_window_masks import SlidingWindowMask, find_sliding_window_masks
from ovpasses.errors import DeviceNotAvailableError, OvpassesError
from ovpasses.passes.disable_stateful_sdpa_fusion import DisableStatefulSDPAFusion, is_fusion_barrier
from ovpasses.passes.kv_cache_shapeof_decomposition import KVCacheShapeOfDecomposition
from ovpasses.passes.sdpa_decomposition import ScaledDotProductAttentionDecomposition
from ovpasses.passes.shared_kv_detection import SharedKVCacheDetection
from ovpasses.passes.sliding_window_mask_slice import SlidingWindowMaskSliceInsertion

log = logging.getLogger(__name__)

RT_ACTION = "ovpasses_kv_action"
OLDEST_SUPPORTED = (2025, 2, 0)
FIRST_FIXED = (2026, 2, 0)

# openvino_genai's paged path (continuous batching: SDPAToPagedAttention when the model is loaded, then
# the plugin's PagedAttention), per release, as [first, end) ranges. Kept here until the runtime facts
# move to a module of their own. Measured 2026-11-22 on CPU with f32 inference and an f32 KV cache.
#
# The converter sets sliding_window = 0 for transformers 5's Gemma 4 mask (a BitwiseAnd chain ending
# in Select, without the Slice its gpt-oss pattern needs) and reads the window once a no-op Slice
# follows the Select: paged_attention_transformation on tiny8 gives every PagedAttention a
# sliding_window of 0 on 2025.2.0 - 2026.2.1; with the Slice, 16 on the sliding layers on 2025.4.1 -
# 2026.2.1 and still 0 on 2025.2.0. 2026.3.1 and 2026.4.1 give 16 without it. End to end (openvino_genai,
# tiny8u: one head size) paged tokens leave transformers' at the 7th and, with the Slice, equal them
# on 2026.0.0 - 2026.2.1 for prompts of 12 and 28 tokens.
PAGED_WINDOW_NEEDS_SLICE = ((2026, 0, 0), (2026, 3, 0))
# ... but the CPU PagedAttention of these releases ignores the window: on 2025.4.1 tiny8u's paged
# tokens with the window read (16) are those without it (0), wrong from the 7th. (The CPU kernel
# honours sliding_window from 2026.0, openvino PR #33035.)
PAGED_CPU_IGNORES_WINDOW = ((2025, 2, 0), (2026, 0, 0))
# The CPU PagedAttention keeps one executor for every layer of a model, cached by a key that leaves
# out part of the head layout, so a layer whose layout differs from the first's runs kernels made for
# another: garbage, NaN or heap corruption. Until 2026.2 the key is the precision only; openvino PR
# #36363 (in 2026.3) adds head size and KV heads, not query heads. Measured with
# ovpasses.testing.paged on two-layer stacks without sharing or masks, against a float64 reference:
# head sizes 16 and 32 (4 query heads), or 8 and 16 (8 query heads): wrong on 2026.0.0, 2026.1.0 and
# 2026.2.1, right on 2026.3.1 and 2026.4.1; 4 and 8 query heads (head size 16): wrong on all of these;
# 2 and 1 KV heads: right on all; one layout: right on all. On 2025.2.0 and 2025.4.1 (the same
# precision-only key in their sources; their CPU cache layout is not the one ovpasses.testing.paged
# feeds) e2b35 (head sizes 8 and 16) is wrong from the first token through openvino_genai, its window
# (512) not reached. None: not fixed in any release measured (2026.4.1 the newest).
PAGED_CPU_NEEDS_ONE_HEAD_SIZE = ((2025, 2, 0), (2026, 3, 0))
PAGED_CPU_NEEDS_ONE_QUERY_HEAD_COUNT = ((2025, 2, 0), None)

# actions, as reported per SDPA
NATIVE = "none: fused natively"
NATIVE_UNFUSED = "none: the plugin leaves this shared cache unfused"
UNANALYSED = "none: a sub-graph operation (not analysed) also reads this cache; left as it is"
STATELESS = "none: reads no cache"
SHAPEOF = "cache ShapeOf computed from the Concat inputs, so the plugin can fuse it"
BARRIER = "kept out of stateful fusion (no-op Reshape on K/V)"
DECOMPOSE = "decomposed (scale after MatMul(Q,K^T)): no other way to keep it out of fusion"

# actions, as reported per sliding-window mask
MASK_SLICE = "Slice inserted: the paged converter reads the window from it"
MASK_SLICED_ALREADY = "none: read through a Slice already; the paged converter reads the window"
MASK_NATIVE = "none: this runtime's paged converter reads the window as it is"
MASK_IGNORED = "none: this runtime's CPU PagedAttention ignores sliding windows (see the warning)"


@dataclass(frozen=True)
class RuntimeProfile:
    """What the pipeline changes for one OpenVINO runtime."""

    version: tuple[int, int, int]
    name: str                      # "affected" (2025.2 - 2026.1) or "fixed" (2026.2 and newer)
    decompose_cache_shapeof: bool  # KVCacheShapeOfDecomposition on every cache Concat's ShapeOf
    slice_sliding_window_mask: bool = False      # SlidingWindowMaskSliceInsertion: the converter needs it
    paged_cpu_ignores_window: bool = False       # no rewrite gives paged CPU a sliding window
    paged_cpu_one_head_size: bool = False        # CPU PagedAttention wrong when layers' head sizes differ
    paged_cpu_one_query_head_count: bool = False  # ... when their query-head counts differ

    @property
    def version_string(self) -> str:
        return ".".join(map(str, self.version))


def profile_for(runtime: str | None = None) -> RuntimeProfile:
    """The profile of ``runtime`` (``"2026.0"``, ``"2026.4.1"``, ...) or, by default, the installed runtime."""
    version = runtime_version(runtime)
    if version < OLDEST_SUPPORTED:
        raise OvpassesError(f"openvino {'.'.join(map(str, version))} is older than the oldest supported "
                            f"release {'.'.join(map(str, OLDEST_SUPPORTED))}; install openvino>=2025.2")
    paged = dict(slice_sliding_window_mask=_within(version, PAGED_WINDOW_NEEDS_SLICE),
                 paged_cpu_ignores_window=_within(version, PAGED_CPU_IGNORES_WINDOW),
                 paged_cpu_one_head_size=_within(version, PAGED_CPU_NEEDS_ONE_HEAD_SIZE),
                 paged_cpu_one_query_head_count=_within(version, PAGED_CPU_NEEDS_ONE_QUERY_HEAD_COUNT))
    if version < FIRST_FIXED:
        return RuntimeProfile(version, "affected", decompose_cache_shapeof=True, **paged)
    return RuntimeProfile(version, "fixed", decompose_cache_shapeof=False, **paged)


def _within(version: tuple[int, int, int], span: tuple[tuple[int, int, int], tuple[int, int, int] | None]) -> bool:
    """``span`` is [first, end); an end of None: not fixed in any release measured."""
    return span[0] <= version and (span[1] is None or version < span[1])


def mask_plan(masks: list[SlidingWindowMask], profile: RuntimeProfile) -> dict[str, str]:
    """Per sliding-window mask (its Select's friendly name), what the pipeline does on ``profile``. Pure."""
    actions = {}
    for mask in masks:
        if not mask.sdpa_direct:
            actions[mask.select] = MASK_SLICED_ALREADY
        elif profile.slice_sliding_window_mask:
            actions[mask.select] = MASK_SLICE
        elif profile.paged_cpu_ignores_window:
            actions[mask.select] = MASK_IGNORED
        else:
            actions[mask.select] = MASK_NATIVE
    return actions


def paged_warnings(profile: RuntimeProfile, analysis: KVSharingAnalysis, heads: dict[str, AttentionHeads],
                   masks: list[SlidingWindowMask]) -> list[str]:
    """What no rewrite mends on openvino_genai's paged path on ``profile``, for this model. Pure.

    The SDPAs that read a KV cache are the ones the paged path turns into PagedAttention. When the
    runtime's CPU PagedAttention needs one head size (or one query-head count) and they have several,
    it computes garbage whatever the rewrite does, short of padding every cache to the widest head
    (which would grow the stateful model's state as well); when it ignores sliding windows, a model
    with one is wrong once a sequence outgrows the window. The messages say so and name the ways out.
    """
    where = (f"paged attention on CPU (openvino_genai with a SchedulerConfig, OpenVINO Model Server) on "
             f"openvino {profile.version_string}")
    stateful = 'use the stateful path (LLMPipeline(..., ATTENTION_BACKEND="SDPA"))'
    newer = f"{stateful} or openvino {'.'.join(map(str, PAGED_CPU_NEEDS_ONE_HEAD_SIZE[1][:2]))} or newer"
    paged = {n: h for n, h in heads.items() if n in analysis.sdpa and analysis.sdpa[n].status != "stateless" and h.known}
    layouts = ", ".join(f"{layout} in {count} layer{'s' if count > 1 else ''}"
                        for layout, count in sorted(head_layouts(paged).items()))
    out = []
    if profile.paged_cpu_one_head_size and len({(h.head_size, h.v_head_size) for h in paged.values()}) > 1:
        out.append(f"{where} gives wrong tokens with this model: its PagedAttention mixes up layers whose head "
                   f"size differs, and these differ (heads x head size: {layouts}); no rewrite changes that; {newer}")
    if profile.paged_cpu_one_query_head_count and len({h.q_heads for h in paged.values()}) > 1:
        out.append(f"{where} gives wrong tokens with this model: its PagedAttention mixes up layers whose number "
                   f"of query heads differs, and these differ (heads x head size: {layouts}); no rewrite changes "
                   f"that, and no release measured fixes it; {stateful}")
    if profile.paged_cpu_ignores_window and masks:
        windows = sorted({m.window for m in masks})
        out.append(f"{where} ignores sliding windows: tokens are wrong once prompt and output outgrow the "
                   f"window ({', '.join(map(str, windows))}) of this model's sliding layers; no rewrite changes "
                   f"that; {stateful} or openvino "
                   f"{'.'.join(map(str, PAGED_CPU_IGNORES_WINDOW[1][:2]))} or newer")
    return out


def plan(analysis: KVSharingAnalysis, profile: RuntimeProfile) -> dict[str, str]:
    """Per SDPA (friendly name), what the pipeline does on ``profile``. Pure: reads the analysis only.

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
    """
    actions: dict[str, str] = {}
    off_path = {name for cache in analysis.caches.values() if cache.off_path_readers for name in cache.sdpa}
    unanalysed = {name for cache in analysis.caches.values() if cache.unanalysed_readers for name in cache.sdpa}
    for name, info in analysis.sdpa.items():
        caches = [analysis.caches[v] for v in info.kv_variables]
        if info.status == "stateless":
            actions[name] = STATELESS
        elif name in off_path:
            actions[name] = BARRIER
        elif name in unanalysed:
            actions[name] = UNANALYSED
        elif info.status == "shared":
            actions[name] = NATIVE_UNFUSED
        elif profile.decompose_cache_shapeof and any(c.concat_shape_consumers for c in caches):
            actions[name] = SHAPEOF
        else:
            actions[name] = NATIVE
    return actions


@dataclass
class PassReport:
    name: str
    changed: list[str]
    seconds: float


@dataclass
class RewriteSummary:
    """What :func:`rewrite` detected and changed."""

    profile: RuntimeProfile
    analysis: KVSharingAnalysis
    actions: dict[str, str]
    passes: list[PassReport] = field(default_factory=list)
    masks: list[SlidingWindowMask] = field(default_factory=list)   # as found before the rewrite
    mask_actions: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(p.changed for p in self.passes)

    def to_dict(self) -> dict:
        return {
            "runtime": self.profile.version_string,
            "profile": self.profile.name,
            "detected": self.analysis.status_counts(),
            "caches": len(self.analysis.caches),
            "shared_caches": sum(c.shared for c in self.analysis.caches.values()),
            "actions": dict(self.actions),
            "passes": [{"name": p.name, "changed": list(p.changed), "seconds": round(p.seconds, 6)}
                       for p in self.passes],
            "unhandled": list(self.analysis.unhandled),
            "sliding_window_masks": self.masks_to_dicts(),
            "warnings": list(self.warnings),
        }

    def masks_to_dicts(self) -> list[dict]:
        return [{"select": m.select, "window": m.window, "sdpa": sorted(m.sdpa_direct + m.sdpa_sliced),
                 "action": self.mask_actions[m.select]} for m in self.masks]

    def __str__(self) -> str:
        counts = self.analysis.status_counts()
        lines = [
            f"runtime {self.profile.version_string} ({self.profile.name} profile)",
            f"detected: {len(self.analysis.caches)} caches "
            f"({sum(c.shared for c in self.analysis.caches.values())} shared), SDPA exclusive={counts['exclusive']} "
            f"shared={counts['shared']} stateless={counts['stateless']}",
        ]
        for p in self.passes:
            lines.append(f"{p.name}: {len(p.changed)} changed" + (f" ({', '.join(p.changed[:3])}"
                                                                  f"{', ...' if len(p.changed) > 3 else ''})"
                                                                  if p.changed else ""))
        for mask in self.masks_to_dicts():
            lines.append(f"sliding-window mask {mask['select']} (window {mask['window']}, {len(mask['sdpa'])} SDPA): "
                         f"{mask['action']}")
        for message in self.analysis.unhandled:
            lines.append(f"not handled: {message}")
        for message in self.warnings:
            lines.append(f"warning: {message}")
        return "\n".join(lines)


# the passes of the pipeline, in the order it runs them
PIPELINE_PASSES = (SharedKVCacheDetection.NAME, DisableStatefulSDPAFusion.NAME,
                   ScaledDotProductAttentionDecomposition.NAME, KVCacheShapeOfDecomposition.NAME,
                   SlidingWindowMaskSliceInsertion.NAME)
SKIPPED = "not applied (pass {pass_} not selected); planned: {action}"


def selected_passes(passes: Iterable[str] | None) -> frozenset[str]:
    """The pass names ``passes`` selects (all when None); raises with the valid names on an unknown one."""
    selected = frozenset(PIPELINE_PASSES if passes is None else passes)
    unknown = sorted(selected - set(PIPELINE_PASSES))
    if unknown:
        raise OvpassesError(f"unknown pass{'es' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                            f"valid names: {', '.join(PIPELINE_PASSES)}")
    return selected


def rewrite(model: ov.Model, runtime: str | None = None, passes: Iterable[str] | None = None) -> RewriteSummary:
    """Run the pipeline on ``model`` in place for ``runtime`` (default: the installed one).

    ``passes`` (names from :data:`PIPELINE_PASSES`) restricts it: the plan is made as usual for the
    runtime profile and each named pass does exactly what it does in the full pipeline; an SDPA whose
    planned change belongs to a pass that is not named is left as it is and its action says so. The
    analysis always runs (the plan needs it); naming SharedKVCacheDetection also writes its verdict
    into the SDPAs' runtime info. Without the barrier pass, the SDPAs planned for it are decomposed
    when ScaledDotProductAttentionDecomposition is named.
    """
    profile = profile_for(runtime)
    selected = selected_passes(passes)
    reports: list[PassReport] = []

    start = time.perf_counter()
    if SharedKVCacheDetection.NAME in selected:
        detection = SharedKVCacheDetection()
        _run(model, detection)
        analysis, sdpa_nodes = detection.analysis, detection.sdpa_nodes
    else:
        ordered = model.get_ordered_ops()
        analysis = analyze_kv_sharing(model, ordered)
        sdpa_nodes = analysis.sdpa_nodes(ordered)
    reports.append(PassReport(SharedKVCacheDetection.NAME, [], time.perf_counter() - start))

    actions = plan(analysis, profile)
    masks = find_sliding_window_masks(sdpa_nodes.values())
    mask_actions = mask_plan(masks, profile)
    warnings = paged_warnings(profile, analysis, attention_heads(sdpa_nodes), masks)
    barrier_names = {n for n, a in actions.items() if a == BARRIER}
    # an earlier run's barrier already keeps these out: neither a second barrier nor the fallback
    taken: set[str] = _behind_barrier(sdpa_nodes, barrier_names)
    if barrier_names - taken and DisableStatefulSDPAFusion.NAME in selected:
        start = time.perf_counter()
        barrier = DisableStatefulSDPAFusion(lambda node: node.get_friendly_name() in barrier_names)
        _run(model, barrier)
        taken.update(barrier.disabled)
        reports.append(PassReport(DisableStatefulSDPAFusion.NAME, barrier.disabled, time.perf_counter() - start))
    # a K/V without a static rank-4 shape cannot take the barrier: decomposition is what is left
    rest = barrier_names - taken
    if rest and ScaledDotProductAttentionDecomposition.NAME in selected:
        start = time.perf_counter()
        decomposition = ScaledDotProductAttentionDecomposition(lambda node: node.get_friendly_name() in rest)
        _run(model, decomposition)
        for name in decomposition.decomposed:
            actions[name] = DECOMPOSE
            taken.add(name)
        reports.append(PassReport(ScaledDotProductAttentionDecomposition.NAME, decomposition.decomposed,
                                  time.perf_counter() - start))
    for name in barrier_names - taken:
        actions[name] = SKIPPED.format(pass_=DisableStatefulSDPAFusion.NAME, action=BARRIER)
    if profile.decompose_cache_shapeof:
        if KVCacheShapeOfDecomposition.NAME in selected:
            start = time.perf_counter()
            shapeof = KVCacheShapeOfDecomposition()
            _run(model, shapeof)
            reports.append(PassReport(KVCacheShapeOfDecomposition.NAME, shapeof.rewritten,
                                      time.perf_counter() - start))
        else:
            for name, action in actions.items():
                if action == SHAPEOF:
                    actions[name] = SKIPPED.format(pass_=KVCacheShapeOfDecomposition.NAME, action=SHAPEOF)
    if MASK_SLICE in mask_actions.values():
        if SlidingWindowMaskSliceInsertion.NAME in selected:
            start = time.perf_counter()
            mask_slice = SlidingWindowMaskSliceInsertion()
            _run(model, mask_slice)
            reports.append(PassReport(SlidingWindowMaskSliceInsertion.NAME, [m.select for m in mask_slice.sliced],
                                      time.perf_counter() - start))
        else:
            for name, action in mask_actions.items():
                if action == MASK_SLICE:
                    mask_actions[name] = SKIPPED.format(pass_=SlidingWindowMaskSliceInsertion.NAME, action=MASK_SLICE)
    if SharedKVCacheDetection.NAME in selected:
        _annotate(sdpa_nodes, actions)   # an SDPA the decomposition replaced is out of the model: harmless
    summary = RewriteSummary(profile, analysis, actions, reports, masks, mask_actions, warnings)
    log.info("ovpasses.rewrite: %s", str(summary).replace("\n", "; "))
    return summary


def compile_model(model: ov.Model, device: str = "CPU", config: dict | None = None, runtime: str | None = None,
                  core: ov.Core | None = None) -> ov.CompiledModel:
    """Rewrite a clone of ``model`` for ``runtime`` and compile it on ``device`` (CPU or GPU)."""
    core = core or ov.Core()
    family = device.split(".")[0].split(":")[0].upper()
    if family not in ("CPU", "GPU"):
        raise OvpassesError(f"compile_model supports the CPU and GPU plugins, not '{device}'")
    available = core.available_devices
    if not any(d == device or d.split(".")[0] == family for d in available):
        raise DeviceNotAvailableError(f"device '{device}' is not available here; OpenVINO sees: "
                                      f"{', '.join(available) or 'no devices'}. The GPU plugin needs an Intel GPU "
                                      "and its driver")
    clone = model.clone()
    rewrite(clone, runtime)
    return core.compile_model(clone, device, config or {})


def _run(model: ov.Model, pass_) -> None:
    manager = Manager()
    manager.register_pass(pass_)
    manager.run_passes(model)


def _behind_barrier(sdpa_nodes: dict[str, ov.Node], names: set[str]) -> set[str]:
    """The SDPAs among ``names`` whose K and V both come from a DisableStatefulSDPAFusion barrier (one made
    in memory, or read back from an IR file: see :func:`is_fusion_barrier`)."""
    return {name for name in names
            if all(is_fusion_barrier(sdpa_nodes[name].input_value(port).get_node()) for port in (1, 2))}


def _annotate(sdpa_nodes: dict[str, ov.Node], actions: dict[str, str]) -> None:
    for name, node in sdpa_nodes.items():
        if name in actions:
            node.get_rt_info()[RT_ACTION] = actions[name]
