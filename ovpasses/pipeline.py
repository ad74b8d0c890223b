"""The runtime-aware pipeline: detect KV sharing, decide per runtime what to change, change it.

``rewrite(model)`` runs in place and returns a :class:`RewriteSummary`; ``compile_model(model)``
rewrites a clone and hands it to the CPU or GPU plugin. What changes depends on the runtime profile
(see :func:`profile_for`, the facts in :mod:`ovpasses.plan.runtimes` and the table in README.md), chosen
from ``openvino.get_version()`` unless ``runtime`` names a release. Three plans, each pure over plain
data: :func:`plan` per SDPA (the KV caches), :func:`mask_plan` per sliding-window mask
(openvino_genai's paged path) and :func:`paged_warnings` for what no rewrite mends on that path.

The pipeline also makes the IR readable by the target: operations newer than the target reads
(:mod:`ovpasses.analysis.op_versions`) are constant-folded or converted into older operations where
that is exact (:func:`lower_op_versions`), and otherwise :func:`rewrite` refuses with
:class:`~ovpasses.errors.UnreadableOperationError`.

``kv_sharing="unshare"`` (opt-in) first gives each borrower of a shared
cache a cache of its own (:class:`~ovpasses.passes.SharedKVCacheUnsharing`), so that the plugin can fuse
every layer, at the memory the copies cost.

``sliding_window="bounded"`` (opt-in) last keeps every cache that only sliding-window attention reads to
its last W-1 positions (:class:`~ovpasses.passes.SlidingWindowKVCacheBounding`, planned by
:func:`~ovpasses.analysis.sliding_window_caches.analyze_sliding_window_caches`): the stateful path
(ov.Core, optimum-intel, openvino_genai with ``ATTENTION_BACKEND="SDPA"``) then holds less state per token.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import openvino as ov
from openvino.passes import Manager

from ovpasses.analysis import stateful_fusion as why
from ovpasses.analysis.attention_heads import AttentionHeads, attention_heads, head_layouts
from ovpasses.analysis.attention_kinds import AttentionKind, attention_kinds
from ovpasses.analysis.kv_sharing import KVSharingAnalysis, analyze_kv_sharing
from ovpasses.analysis.sharing_lint import Finding, lint_kv_sharing
from ovpasses.analysis.sliding_window_caches import SlidingWindowCaches, analyze_sliding_window_caches
from ovpasses.analysis.sliding_window_masks import SlidingWindowMask, find_sliding_window_masks
from ovpasses.analysis.stateful_fusion import FusionVerdict, predict_fusion
from ovpasses.analysis.op_versions import UnreadableOp, analyze_op_versions, op_version
from ovpasses.devices import normalize_device, resolve_device
from ovpasses.errors import OvpassesError, UnreadableOperationError, UnsupportedRuntimeError
from ovpasses.files.io import read_ir
from ovpasses.passes.convert_one_hot16_to_one_hot1 import ConvertOneHot16ToOneHot1
from ovpasses.passes.disable_stateful_sdpa_fusion import DisableStatefulSDPAFusion, is_fusion_barrier
from ovpasses.passes.erfinv_constant_folding import ErfInvConstantFolding
from ovpasses.passes.kv_cache_shapeof_decomposition import KVCacheShapeOfDecomposition
from ovpasses.passes.sdpa_decomposition import ScaledDotProductAttentionDecomposition
from ovpasses.passes.shared_kv_cache_unsharing import SharedKVCacheUnsharing, UnsharedCache, plan_unsharing
from ovpasses.passes.shared_kv_detection import SharedKVCacheDetection
from ovpasses.plan.runtimes import (
    FIRST_FIXED,
    NEWEST_KNOWN,
    OLDEST_SUPPORTED,
    PAGED_CPU_IGNORES_WINDOW,
    PAGED_CPU_NEEDS_ONE_HEAD_SIZE,
    PAGED_CPU_NEEDS_ONE_QUERY_HEAD_COUNT,
    PAGED_WINDOW_NEEDS_SLICE,
    OPSETS_MEASURED_ON,
    Version,
    installed_version,
    parse_release,
    reads_op,
    version_string,
)
from ovpasses.passes.sliding_window_cache_bounding import SlidingWindowKVCacheBounding
from ovpasses.passes.sliding_window_mask_slice import SlidingWindowMaskSliceInsertion

log = logging.getLogger(__name__)

RT_ACTION = "ovpasses_kv_action"

# actions, as reported per SDPA
NATIVE = "none: fused natively"
NATIVE_UNFUSED = "none: the plugin leaves this shared cache unfused"
UNANALYSED = "none: a sub-graph operation (not analysed) also reads this cache; left as it is"
STATELESS = "none: reads no cache"
SHAPEOF = "cache ShapeOf computed from the Concat inputs, so the plugin can fuse it"
BARRIER = "kept out of stateful fusion (no-op Reshape on K/V)"
DECOMPOSE = "decomposed (scale after MatMul(Q,K^T)): no other way to keep it out of fusion"
UNSHARED = "reads a KV cache of its own (unshared), so the plugin can fuse it"
BOUNDED = "reads a bounded sliding-window cache (its last W-1 positions); not fused"

# what rewrite(kv_sharing=...) does with caches that several SDPAs read
KV_SHARING_MODES = ("keep", "unshare")
# what rewrite(sliding_window=...) does with caches that only sliding-window attention reads
SLIDING_WINDOW_MODES = ("full", "bounded")

# actions, as reported per sliding-window mask
MASK_SLICE = "Slice inserted: the paged converter reads the window from it"
MASK_SLICED_ALREADY = "none: read through a Slice already; the paged converter reads the window"
MASK_NATIVE = "none: this runtime's paged converter reads the window as it is"
MASK_IGNORED = "none: this runtime's CPU PagedAttention ignores sliding windows (see the warning)"


@dataclass(frozen=True)
class RuntimeProfile:
    """What the pipeline changes for one OpenVINO runtime."""

    version: Version
    name: str                      # "affected" (2025.2 - 2026.1) or "fixed" (2026.2 and newer)
    decompose_cache_shapeof: bool  # KVCacheShapeOfDecomposition on every cache Concat's ShapeOf
    slice_sliding_window_mask: bool = False      # SlidingWindowMaskSliceInsertion: the converter needs it
    paged_cpu_ignores_window: bool = False       # no rewrite gives paged CPU a sliding window
    paged_cpu_one_head_size: bool = False        # CPU PagedAttention wrong when layers' head sizes differ
    paged_cpu_one_query_head_count: bool = False  # ... when their query-head counts differ

    @property
    def version_string(self) -> str:
        return version_string(self.version)


_warned_newer: set[Version] = set()


def profile_for(runtime: str | None = None) -> RuntimeProfile:
    """The profile of ``runtime`` (a release: ``"2026.0"``, ``"2026.4.1"``) or, when None, of the installed runtime.

    Raises :class:`UnsupportedRuntimeError` for a name that is not a release and for a release older than
    :data:`~ovpasses.plan.runtimes.OLDEST_SUPPORTED`; logs a warning (once per release) for one newer than every
    release the profiles were measured on, and applies the fixed profile to it.
    """
    if runtime is None:
        version = installed_version()
        if version < OLDEST_SUPPORTED:
            raise UnsupportedRuntimeError(
                f"the installed openvino {version_string(version)} is older than the oldest supported release "
                f"{version_string(OLDEST_SUPPORTED)}; install openvino>={version_string(OLDEST_SUPPORTED[:2])}")
    elif isinstance(runtime, str):
        version = parse_release(runtime)
        if version < OLDEST_SUPPORTED:
            raise UnsupportedRuntimeError(
                f"ovpasses prepares IRs for openvino {version_string(OLDEST_SUPPORTED[:2])} and newer; "
                f"{runtime.strip()} is older (releases before {version_string(OLDEST_SUPPORTED)} were not measured); "
                f"name a target of {version_string(OLDEST_SUPPORTED[:2])} or newer")
    else:
        raise OvpassesError(f"runtime must be a release name such as '2026.0' or '2026.4.1', or None for the "
                            f"installed openvino; got {type(runtime).__name__} {runtime!r}")
    name = "affected" if version < FIRST_FIXED else "fixed"
    paged = dict(slice_sliding_window_mask=_within(version, PAGED_WINDOW_NEEDS_SLICE),
                 paged_cpu_ignores_window=_within(version, PAGED_CPU_IGNORES_WINDOW),
                 paged_cpu_one_head_size=_within(version, PAGED_CPU_NEEDS_ONE_HEAD_SIZE),
                 paged_cpu_one_query_head_count=_within(version, PAGED_CPU_NEEDS_ONE_QUERY_HEAD_COUNT))
    if version > NEWEST_KNOWN and version not in _warned_newer:
        _warned_newer.add(version)
        log.warning("openvino %s is newer than every release the profiles were measured on (newest %s); "
                    "applying the %s profile, as for %s and newer", version_string(version),
                    version_string(NEWEST_KNOWN), name, version_string(FIRST_FIXED[:2]))
    return RuntimeProfile(version, name, decompose_cache_shapeof=name == "affected", **paged)


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


@dataclass(frozen=True)
class Decision:
    """What the pipeline plans for one SDPA, and why (the reason comes from the predicate that decided)."""

    action: str
    reason: str


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
            decisions[name] = Decision(STATELESS, reason)
        elif reason := why.off_path_reader(analysis, name):
            decisions[name] = Decision(BARRIER, reason)
        elif reason := why.unanalysed_reader(analysis, name):
            decisions[name] = Decision(UNANALYSED, reason)
        elif reason := why.shared_concat(analysis, name):
            decisions[name] = Decision(NATIVE_UNFUSED, reason)
        elif (reason := why.concat_shapeof(analysis, name)) and profile.decompose_cache_shapeof:
            decisions[name] = Decision(SHAPEOF, f"{reason}: on this runtime the fused kernel loses its state to it")
        else:
            decisions[name] = Decision(NATIVE, "exclusive cache" + (f"; {reason}, which this runtime handles"
                                                                    if reason else ""))
    return decisions


def plan(analysis: KVSharingAnalysis, profile: RuntimeProfile) -> dict[str, str]:
    """Per SDPA (friendly name), what the pipeline does on ``profile``: the actions of
    :func:`plan_with_reasons`. Pure: reads the analysis only."""
    return {name: decision.action for name, decision in plan_with_reasons(analysis, profile).items()}


@dataclass
class PassReport:
    name: str
    changed: list[str]
    seconds: float


@dataclass(frozen=True)
class OpVersionAction:
    """One operation the target could not read as exported, and what the pipeline did about it."""

    op: UnreadableOp
    action: str          # what was done, or "refused: <why>"
    handled: bool        # the rewritten model no longer holds it

    def to_dict(self) -> dict:
        return {**self.op.to_dict(), "action": self.action, "handled": self.handled}


@dataclass(repr=False)
class OpVersionLowering:
    """What :func:`lower_op_versions` did: per operation the target could not read, its action."""

    target: Version
    actions: list[OpVersionAction] = field(default_factory=list)
    passes: list[PassReport] = field(default_factory=list)

    @property
    def refused(self) -> list[OpVersionAction]:
        return [a for a in self.actions if not a.handled]

    def error_message(self) -> str:
        return refusal_message(self.target, self.refused)


def refusal_message(target: Version, refused: list[OpVersionAction]) -> str:
    """The message of :class:`UnreadableOperationError`: each refused operation (the first five), why,
    and the first release that reads it."""
    shown = version_string(target)
    parts = []
    for item in refused[:5]:
        first = item.op.first_read_string
        reads = (f"openvino {first} is the first release that reads it" if first else
                 "no release that ovpasses has measured reads it")
        parts.append(f"{item.op.describe()}: {item.action.removeprefix('refused: ')}; {reads}")
    more = f"; and {len(refused) - 5} more" if len(refused) > 5 else ""
    firsts = [a.op.first_read for a in refused if a.op.first_read is not None]
    advice = (f"Prepare the IR for openvino {version_string(max(firsts))} or newer (--runtime), or run it there"
              if len(firsts) == len(refused) else "Run it on the runtime that exported it")
    count = f"{len(refused)} operation{'s' if len(refused) > 1 else ''}"
    return (f"openvino {shown} cannot read {count} of this model, and ovpasses cannot replace "
            f"{'them' if len(refused) > 1 else 'it'} by operations that {shown} reads: {'; '.join(parts)}{more}. "
            f"{advice}")


@dataclass(repr=False)
class RewriteSummary:
    """What :func:`rewrite` detected and changed, and why (``reasons``: the plan's reason per SDPA)."""

    profile: RuntimeProfile
    analysis: KVSharingAnalysis
    actions: dict[str, str]
    passes: list[PassReport] = field(default_factory=list)
    masks: list[SlidingWindowMask] = field(default_factory=list)   # as found before the rewrite
    mask_actions: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)
    kinds: dict[str, AttentionKind] = field(default_factory=dict)   # per SDPA, its attention kind
    findings: list[Finding] = field(default_factory=list)            # the sharing lint's
    # operations the target could not read as exported (none for the installed runtime), and what was done
    op_versions: list[OpVersionAction] = field(default_factory=list)
    kv_sharing: str = "keep"
    unshared: list[UnsharedCache] = field(default_factory=list)   # the variables kv_sharing="unshare" added
    kept_shared: dict[str, str] = field(default_factory=dict)     # cache (for a borrower) -> why not unshared
    # with kv_sharing="unshare": the analysis of the model as unsharing left it (``analysis`` is the input's)
    analysis_after: KVSharingAnalysis | None = None
    sliding_window: str = "full"
    # with sliding_window="bounded": which caches are bounded, their windows, why the others are not
    sliding_window_caches: SlidingWindowCaches | None = None

    @property
    def changed(self) -> bool:
        return any(p.changed for p in self.passes)

    def __repr__(self) -> str:
        counts = self.analysis.status_counts()
        return (f"RewriteSummary(runtime {self.profile.version_string} {self.profile.name}, {len(self.actions)} SDPA: "
                f"exclusive={counts['exclusive']} shared={counts['shared']} stateless={counts['stateless']}, "
                f"changed {sum(len(p.changed) for p in self.passes)} nodes)")

    def not_applied(self) -> dict[str, list[str]]:
        """Per pass that was not selected, the SDPAs it would have changed (in topological order)."""
        out: dict[str, list[str]] = {}
        for name, action in self.actions.items():
            if action.startswith(SKIPPED_PREFIX):
                out.setdefault(action[len(SKIPPED_PREFIX):].split(" ", 1)[0], []).append(name)
        return out

    def fusion(self, unmodified: bool = False) -> dict[str, FusionVerdict]:
        """Per SDPA, whether the CPU plugin is expected to fuse it into its stateful kernel, and why: in the
        model as the rewrite leaves it, or (``unmodified``) as it was before. See
        :func:`ovpasses.analysis.stateful_fusion.predict_fusion`."""
        inserted = {n for p in self.passes if p.name == DisableStatefulSDPAFusion.NAME for n in p.changed}
        shapeof_moved = any(p.changed for p in self.passes if p.name == KVCacheShapeOfDecomposition.NAME)
        after = self.analysis if unmodified or self.analysis_after is None else self.analysis_after
        verdicts = {}
        for name, action in self.actions.items():
            analysis = after if name in after.sdpa else self.analysis   # a decomposed SDPA left the model
            barrier = action == BARRIER and not (unmodified and name in inserted)
            verdicts[name] = predict_fusion(
                analysis, name, barrier=barrier, decomposed=action == DECOMPOSE and not unmodified,
                shapeof_moved=action == SHAPEOF and shapeof_moved and not unmodified,
                shapeof_loses_state=self.profile.decompose_cache_shapeof)
        return verdicts

    @property
    def readable(self) -> bool:
        """Whether the target runtime reads the rewritten model (every operation it could not read was replaced)."""
        return all(a.handled for a in self.op_versions)

    @property
    def extra_cache_bytes_per_token(self) -> int | None:
        """KV-cache memory the unshared copies add per token of context at batch 1 (None: unknown)."""
        sizes = [u.bytes_per_token for u in self.unshared]
        return None if None in sizes else sum(sizes)

    def to_dict(self) -> dict:
        return {
            "runtime": self.profile.version_string,
            "profile": self.profile.name,
            "detected": self.analysis.status_counts(),
            "caches": len(self.analysis.caches),
            "shared_caches": sum(c.shared for c in self.analysis.caches.values()),
            "actions": dict(self.actions),
            "reasons": dict(self.reasons),
            "passes": [{"name": p.name, "changed": list(p.changed), "seconds": round(p.seconds, 6)}
                       for p in self.passes],
            "unhandled": list(self.analysis.unhandled),
            "sliding_window_masks": self.masks_to_dicts(),
            "warnings": list(self.warnings),
            "lint": [f.to_dict() for f in self.findings],
            "unreadable_ops": [a.to_dict() for a in self.op_versions],
            "readable": self.readable,
            "kv_sharing": self.kv_sharing,
            "unshared": [asdict(u) for u in self.unshared],
            "kept_shared": dict(self.kept_shared),
            "extra_cache_bytes_per_token": self.extra_cache_bytes_per_token,
            "sliding_window": self.sliding_window,
            "sliding_window_caches": (None if self.sliding_window_caches is None
                                      else self.sliding_window_caches.to_dict()),
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
        fusion = self.fusion()
        for pass_, names in self.not_applied().items():
            planned = self.actions[names[0]].split("planned: ", 1)[-1]
            layers = ", ".join(str(self.analysis.layer(n)) for n in names)
            lines.append(f"not applied ({pass_} not selected): layer{'s' if len(names) > 1 else ''} {layers}; "
                         f"planned: {planned}")
            for name in names:
                lines.append(f"  layer {self.analysis.layer(name)} as left: {fusion[name].reason}")
        for mask in self.masks_to_dicts():   # the Select's name is in to_dict()
            lines.append(f"sliding-window mask (window {mask['window']}, {len(mask['sdpa'])} SDPA): {mask['action']}")
        if self.kv_sharing != "keep":
            lines.append(f"kv sharing: {self.kv_sharing}: {len(self.unshared)} caches added, "
                         f"{_bytes(self.extra_cache_bytes_per_token)} per token of context (batch 1)")
        for cache, reason in self.kept_shared.items():
            lines.append(f"kept shared: {cache}: {reason}")
        if self.sliding_window != "full" and self.sliding_window_caches is not None:
            caches = self.sliding_window_caches
            lines.append(f"sliding window: {self.sliding_window}: {len(caches.bounded)} caches bounded"
                         + (f" (window {', '.join(map(str, sorted({b.window for b in caches.bounded.values()})))}, "
                            f"past length from {caches.reference})" if caches.bounded else ""))
            for vid, refusal in caches.refused.items():
                lines.append(f"  not bounded: {vid}: {refusal.message}")
        for message in self.analysis.unhandled:
            lines.append(f"not handled: {message}")
        for finding in self.findings:
            lines.append(f"warning: KV sharing: {finding.message}")
        for message in self.warnings:
            lines.append(f"warning: {message}")
        measured = self.profile.version in OPSETS_MEASURED_ON
        for item in self.op_versions:
            verb = "cannot read" if measured else "is not known to read"   # between measured releases
            lines.append(f"{self.profile.version_string} {verb} {item.op.describe()}: {item.action}")
        return "\n".join(lines)


def _bytes(count: int | None) -> str:
    return "an unknown number of bytes (a dynamic head dimension)" if count is None else f"{count} bytes"


# The passes of the pipeline, in the order it runs them, with what each does in one line.
PASSES: dict[str, tuple[type, str]] = {
    SharedKVCacheDetection.NAME: (
        SharedKVCacheDetection,
        "analysis only: records per SDPA which KV caches it reads and whether another SDPA reads them too"),
    SharedKVCacheUnsharing.NAME: (
        SharedKVCacheUnsharing,
        "--kv-sharing unshare only: gives each borrower of a shared cache a cache of its own, so every SDPA can "
        "fuse"),
    DisableStatefulSDPAFusion.NAME: (
        DisableStatefulSDPAFusion,
        "keeps SDPAs that read a cache off its Assign path out of the CPU stateful SDPA fusion (no-op Reshape)"),
    ScaledDotProductAttentionDecomposition.NAME: (
        ScaledDotProductAttentionDecomposition,
        "decomposes those SDPAs the barrier cannot take (K/V without a static rank-4 shape) into MatMul/Softmax"),
    KVCacheShapeOfDecomposition.NAME: (
        KVCacheShapeOfDecomposition,
        "affected runtimes (2025.2 - 2026.1): computes a cache Concat's ShapeOf from the Concat inputs"),
    SlidingWindowMaskSliceInsertion.NAME: (
        SlidingWindowMaskSliceInsertion,
        "2026.0 - 2026.2: no-op Slice after a sliding-window mask, so the paged (PagedAttention) converter keeps "
        "the window"),
    SlidingWindowKVCacheBounding.NAME: (
        SlidingWindowKVCacheBounding,
        "--sliding-window bounded only: caches only sliding-window attention reads keep their last W-1 positions"),
    ErfInvConstantFolding.NAME: (
        ErfInvConstantFolding,
        "targets before 2026.2: replaces ErfInv (opset17) of a Constant by its value, computed in float64"),
    ConvertOneHot16ToOneHot1.NAME: (
        ConvertOneHot16ToOneHot1,
        "targets before 2025.4: OneHot-16 as the OneHot-1 (and opset1 index arithmetic) that computes the same"),
}
PIPELINE_PASSES = tuple(PASSES)
# Passes that replace operations the target cannot read, each by the (type, opset) it replaces
LOWERING_PASSES: tuple[type, ...] = (ErfInvConstantFolding, ConvertOneHot16ToOneHot1)
NO_LOWERING = "ovpasses has no constant folding or exact decomposition into older operations for it"
SKIPPED = "not applied (pass {pass_} not selected); planned: {action}"
SKIPPED_PREFIX = "not applied (pass "


def selected_passes(passes: str | Iterable[str] | None) -> frozenset[str]:
    """The pass names ``passes`` selects: all when None, else one name (``"A"``), a comma-separated
    string (``"A,B"``, as ``--passes`` takes it) or an iterable of names. Raises :class:`OvpassesError`
    naming the valid names on an unknown or missing name, and saying what is expected on another type."""
    if passes is None:
        return frozenset(PIPELINE_PASSES)
    if isinstance(passes, str):
        names = passes.split(",")
    elif isinstance(passes, Iterable) and not isinstance(passes, (bytes, bytearray)):
        names = list(passes)
    else:
        names = None
    if names is None or not all(isinstance(n, str) for n in names):
        raise OvpassesError(f"passes must be None, a pass name, a string 'A,B' or a list of pass names; got "
                            f"{type(passes).__name__} {passes!r}; valid names: {', '.join(PIPELINE_PASSES)}")
    selected = frozenset(n.strip() for n in names if n.strip())
    if not selected:
        raise OvpassesError(f"passes {passes!r} names no pass; valid names: {', '.join(PIPELINE_PASSES)}")
    unknown = sorted(selected - set(PIPELINE_PASSES))
    if unknown:
        raise OvpassesError(f"unknown pass{'es' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                            f"valid names: {', '.join(PIPELINE_PASSES)}")
    return selected


def rewrite(model: ov.Model, runtime: str | None = None, passes: str | Iterable[str] | None = None,
            kv_sharing: str = "keep", sliding_window: str = "full",
            sliding_window_margin: int = 0) -> RewriteSummary:
    """Run the pipeline on ``model`` in place for ``runtime`` (default: the installed one).

    ``passes`` (names from :data:`PIPELINE_PASSES`: one name, ``"A,B"`` or a list; see
    :func:`selected_passes`) restricts it: the plan is made as usual for the runtime profile and each
    named pass does exactly what it does in the full pipeline; an SDPA whose
    planned change belongs to a pass that is not named is left as it is and its action says so. The
    analysis always runs (the plan needs it); naming SharedKVCacheDetection also writes its verdict
    into the SDPAs' runtime info. Without the barrier pass, the SDPAs planned for it are decomposed
    when ScaledDotProductAttentionDecomposition is named.

    When ``runtime`` names a release that cannot read some operation of the model (an ErfInv on
    2026.1, say), the operation is replaced where that is exact (:func:`lower_op_versions`); an
    operation that cannot be replaced raises :class:`UnreadableOperationError` naming it, its opset,
    the target and the first release that reads it. The model has been rewritten by then (in place,
    as always); the CLI writes nothing.

    ``kv_sharing="unshare"`` first gives each borrower of a shared cache a cache of its own
    (:class:`SharedKVCacheUnsharing`, planned by :func:`plan_unsharing`); the rest of the pipeline then
    plans on the model as it is afterwards. The summary's ``analysis`` stays what was detected in the
    input; ``unshared`` lists the caches added and what each costs per token.

    ``sliding_window="bounded"`` last bounds every cache that only sliding-window attention reads to its
    last W-1 positions (:class:`SlidingWindowKVCacheBounding`); ``sliding_window_caches`` says which, with
    their windows, and why the others are left whole. ``"full"`` (default) leaves every cache whole.
    ``sliding_window_margin`` positions more are kept, so that a client may take that many back (openvino_genai's
    stateful chat takes back each answer: measured on 2026.4.1, it needs a margin of the longest answer); a
    client that takes back more makes the inference fail, never decode from a cache that lost what the mask needs.
    """
    summary = run_pipeline(model, runtime, passes, kv_sharing, sliding_window, sliding_window_margin)
    if not summary.readable:
        raise UnreadableOperationError(refusal_message(summary.profile.version,
                                                       [a for a in summary.op_versions if not a.handled]))
    return summary


def run_pipeline(model: ov.Model, runtime: str | None = None, passes: str | Iterable[str] | None = None,
                 kv_sharing: str = "keep", sliding_window: str = "full",
                 sliding_window_margin: int = 0) -> RewriteSummary:
    """:func:`rewrite` without the refusal: the summary says which operations the target still cannot
    read (``summary.readable``, ``summary.op_versions``). ``ovpass inspect`` reports from it."""
    _check_kv_sharing(kv_sharing)
    if sliding_window not in SLIDING_WINDOW_MODES:
        raise OvpassesError(f"sliding_window must be one of {', '.join(SLIDING_WINDOW_MODES)}, not {sliding_window!r}")
    if not isinstance(sliding_window_margin, int) or sliding_window_margin < 0:
        raise OvpassesError(f"sliding_window_margin must be a whole number of positions >= 0, not "
                            f"{sliding_window_margin!r}")
    profile = profile_for(runtime)
    selected = selected_passes(passes)
    reports: list[PassReport] = []

    start = time.perf_counter()
    analysis, sdpa_nodes = _detect(model, selected)
    reports.append(PassReport(SharedKVCacheDetection.NAME, [], time.perf_counter() - start))

    detected, unsharing = analysis, _Unsharing()
    if kv_sharing == "unshare":   # the rest of the pipeline plans on the model as it is afterwards
        analysis, sdpa_nodes, unsharing = _unshare(model, analysis, sdpa_nodes, selected, reports)

    kinds = attention_kinds(sdpa_nodes)
    findings = lint_kv_sharing(detected, kinds)
    decisions = plan_with_reasons(analysis, profile)
    actions = {name: decision.action for name, decision in decisions.items()}
    unsharing.update_actions(actions, analysis)
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
    caches = None
    if sliding_window == "bounded":   # last: it plans on the model as the other passes left it
        caches, after = _bound(model, selected, reports, sliding_window_margin)
        analysis = after or analysis
        for name in (n for cache in caches.bounded.values() for n in cache.readers):
            actions[name] = (BOUNDED if after else
                             SKIPPED.format(pass_=SlidingWindowKVCacheBounding.NAME, action=BOUNDED))
    if SharedKVCacheDetection.NAME in selected:
        _annotate(sdpa_nodes, actions)   # an SDPA the decomposition replaced is out of the model: harmless
    lowering = lower_op_versions(model, profile.version, selected)
    summary = RewriteSummary(profile, detected, actions, reports + lowering.passes, masks, mask_actions, warnings,
                             reasons={name: decision.reason for name, decision in decisions.items()},
                             kinds=kinds, findings=findings, op_versions=lowering.actions, kv_sharing=kv_sharing,
                             unshared=unsharing.unshared, kept_shared=unsharing.kept_shared,
                             analysis_after=analysis if analysis is not detected else None,
                             sliding_window=sliding_window, sliding_window_caches=caches)
    log.info("ovpasses.rewrite: %s", str(summary).replace("\n", "; "))
    return summary


def lower_op_versions(model: ov.Model, target: Version, selected: frozenset[str] | None = None) -> OpVersionLowering:
    """Replace, in place, the operations of ``model`` that release ``target`` cannot read, where that is
    exact: each pass of :data:`LOWERING_PASSES` (those in ``selected``; default all) runs when the model
    holds an operation it replaces that ``target`` cannot read, and only on such operations.

    Returns, per operation ``target`` could not read as exported, what was done, or why it was refused
    (the reason comes from the pass whose pattern did not take it). Raises nothing: :func:`rewrite`
    turns refusals into :class:`UnreadableOperationError`. The installed runtime, and any release at
    least as new, reads whatever the installed one could build: for those nothing is looked at.
    """
    selected = frozenset(PIPELINE_PASSES) if selected is None else selected
    lowering = OpVersionLowering(target)
    with contextlib.suppress(UnsupportedRuntimeError):   # a local build's version: look
        if target >= installed_version():
            return lowering
    before = analyze_op_versions(model, target)
    if before.readable:
        return lowering
    unreadable = lambda node: not reads_op(target, node.get_type_name(), op_version(node))  # noqa: E731
    found = before.versions()
    for pass_class in LOWERING_PASSES:
        if pass_class.NAME in selected and found & set(pass_class.OPS):
            start = time.perf_counter()
            lowering_pass = pass_class(unreadable)
            _run(model, lowering_pass)
            lowering.passes.append(PassReport(pass_class.NAME, list(lowering_pass.replaced),
                                              time.perf_counter() - start))
    # the truth is what is left: an operation still there was refused, whatever the passes reported
    left = {(op.name, op.type, op.opset, op.where) for op in analyze_op_versions(model, target).unreadable}
    for op in before.unreadable:
        owner = next((p for p in LOWERING_PASSES if (op.type, op.opset) in p.OPS), None)
        if (op.name, op.type, op.opset, op.where) not in left:
            lowering.actions.append(OpVersionAction(op, owner.ACTION if owner else "replaced", True))
        elif owner is None:
            lowering.actions.append(OpVersionAction(op, f"refused: {NO_LOWERING}", False))
        elif owner.NAME not in selected:
            lowering.actions.append(OpVersionAction(op, f"refused: pass {owner.NAME} not selected", False))
        else:
            lowering.actions.append(OpVersionAction(op, f"refused: {owner.why_not(op)}", False))
    return lowering


def compile_model(model: ov.Model | str | os.PathLike, device: str = "CPU", config: dict | None = None,
                  runtime: str | None = None, core: ov.Core | None = None, kv_sharing: str = "keep",
                  sliding_window: str = "full", sliding_window_margin: int = 0) -> ov.CompiledModel:
    """Rewrite a clone of ``model`` for ``runtime`` (and ``kv_sharing``, ``sliding_window``) and compile it on
    ``device`` (CPU or GPU).

    ``model`` is an ``ov.Model`` or, as for OpenVINO's own ``compile_model``, the path of an IR ``.xml``
    (read with :func:`ovpasses.files.io.read_ir`). ``device`` is any case in its family part (``"cpu"``,
    ``"gpu.0"``); one that OpenVINO does not see here raises :class:`DeviceNotAvailableError`.
    """
    core = core or ov.Core()
    name = normalize_device(device)
    if name.split(".")[0] not in ("CPU", "GPU"):
        raise OvpassesError(f"compile_model supports the CPU and GPU plugins, not '{device}'")
    name = resolve_device(device, core)
    if isinstance(model, (str, os.PathLike)):
        clone = read_ir(model, core)
    elif isinstance(model, ov.Model):
        clone = model.clone()
    else:
        raise OvpassesError(f"compile_model takes an openvino.Model or the path of an IR .xml file, not "
                            f"{type(model).__name__}")
    rewrite(clone, runtime, kv_sharing=kv_sharing, sliding_window=sliding_window,
            sliding_window_margin=sliding_window_margin)
    return core.compile_model(clone, name, config or {})


def _detect(model: ov.Model, selected: frozenset[str]) -> tuple[KVSharingAnalysis, dict[str, ov.Node]]:
    """The KV-sharing analysis of ``model`` and its SDPA nodes by name; through SharedKVCacheDetection
    (which also writes its verdict into the SDPAs' runtime info) when that pass is selected."""
    if SharedKVCacheDetection.NAME in selected:
        detection = SharedKVCacheDetection()
        _run(model, detection)
        return detection.analysis, detection.sdpa_nodes
    ordered = model.get_ordered_ops()
    analysis = analyze_kv_sharing(model, ordered)
    return analysis, analysis.sdpa_nodes(ordered)


def _run(model: ov.Model, pass_) -> None:
    manager = Manager()
    manager.register_pass(pass_)
    manager.run_passes(model)


def _check_kv_sharing(kv_sharing: str) -> None:
    if kv_sharing not in KV_SHARING_MODES:
        raise OvpassesError(f"kv_sharing must be one of {', '.join(KV_SHARING_MODES)}, not {kv_sharing!r}")


@dataclass
class _Unsharing:
    """What the ``kv_sharing="unshare"`` step did (nothing, in ``keep``)."""

    unshared: list[UnsharedCache] = field(default_factory=list)
    kept_shared: dict[str, str] = field(default_factory=dict)
    not_selected: set[str] = field(default_factory=set)   # borrowers planned for the pass when it is not selected

    def update_actions(self, actions: dict[str, str], analysis: KVSharingAnalysis) -> None:
        """A borrower that now reads an exclusive cache of its own is reported as unshared."""
        for name in {u.borrower for u in self.unshared}:
            if analysis.sdpa[name].status == "exclusive" and actions[name] == NATIVE:
                actions[name] = UNSHARED
        for name in self.not_selected:
            actions[name] = SKIPPED.format(pass_=SharedKVCacheUnsharing.NAME, action=UNSHARED)


def _unshare(model: ov.Model, analysis: KVSharingAnalysis, sdpa_nodes: dict[str, ov.Node],
             selected: frozenset[str], reports: list[PassReport]):
    """Plan and run :class:`SharedKVCacheUnsharing`; return the analysis and SDPA nodes of the model as it
    is afterwards (a fresh detection when the pass changed it) and what the step did."""
    planned = plan_unsharing(analysis)
    step = _Unsharing(kept_shared=dict(planned.refused))
    if SharedKVCacheUnsharing.NAME not in selected:
        step.not_selected = {b for borrowers in planned.targets.values() for b in borrowers}
        return analysis, sdpa_nodes, step
    if not planned.targets:
        return analysis, sdpa_nodes, step
    start = time.perf_counter()
    unshare = SharedKVCacheUnsharing(planned.targets)
    _run(model, unshare)
    step.unshared = unshare.unshared
    step.kept_shared.update(unshare.skipped)
    if step.unshared:
        analysis, sdpa_nodes = _detect(model, selected)   # the runtime info must describe the model as it is now
    reports.append(PassReport(SharedKVCacheUnsharing.NAME, [u.variable_id for u in step.unshared],
                              time.perf_counter() - start))
    return analysis, sdpa_nodes, step


def _bound(model: ov.Model, selected: frozenset[str], reports: list[PassReport], margin: int):
    """Plan (:func:`analyze_sliding_window_caches`, on the model as it is now) and run
    :class:`SlidingWindowKVCacheBounding`; return the plan and the KV-sharing analysis of the model
    afterwards (None when nothing changed)."""
    start = time.perf_counter()
    ordered = model.get_ordered_ops()
    analysis = analyze_kv_sharing(model, ordered)
    caches = analyze_sliding_window_caches(model, analysis,
                                           find_sliding_window_masks(analysis.sdpa_nodes(ordered).values()),
                                           margin)
    if not caches.bounded or SlidingWindowKVCacheBounding.NAME not in selected:
        return caches, None
    bounding = SlidingWindowKVCacheBounding(caches)
    _run(model, bounding)
    reports.append(PassReport(SlidingWindowKVCacheBounding.NAME, bounding.bounded, time.perf_counter() - start))
    return caches, analyze_kv_sharing(model)


def _behind_barrier(sdpa_nodes: dict[str, ov.Node], names: set[str]) -> set[str]:
    """The SDPAs among ``names`` whose K and V both come from a DisableStatefulSDPAFusion barrier (one made
    in memory, or read back from an IR file: see :func:`is_fusion_barrier`)."""
    return {name for name in names
            if all(is_fusion_barrier(sdpa_nodes[name].input_value(port).get_node()) for port in (1, 2))}


def _annotate(sdpa_nodes: dict[str, ov.Node], actions: dict[str, str]) -> None:
    for name, node in sdpa_nodes.items():
        if name in actions:
            node.get_rt_info()[RT_ACTION] = actions[name]
