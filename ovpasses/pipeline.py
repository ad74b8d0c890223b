"""The runtime-aware pipeline: detect KV sharing, decide per runtime what to change, change it.

``rewrite(model)`` runs in place and returns a :class:`RewriteSummary`; ``compile_model(model)``
rewrites a clone and hands it to the CPU or GPU plugin. What changes depends on the runtime profile
(see :func:`profile_for` and the table in README.md), chosen from ``openvino.get_version()`` unless
``runtime`` names a release. ``kv_sharing="unshare"`` (opt-in) first gives each borrower of a shared
cache a cache of its own (:class:`~ovpasses.passes.SharedKVCacheUnsharing`), so that the plugin can fuse
every layer, at the memory the copies cost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import openvino as ov
from openvino.passes import Manager

from ovpasses._ov import runtime_version
from ovpasses.analysis.kv_sharing import KVSharingAnalysis, analyze_kv_sharing
from ovpasses.errors import DeviceNotAvailableError, OvpassesError
from ovpasses.passes.disable_stateful_sdpa_fusion import DisableStatefulSDPAFusion, is_fusion_barrier
from ovpasses.passes.kv_cache_shapeof_decomposition import KVCacheShapeOfDecomposition
from ovpasses.passes.sdpa_decomposition import ScaledDotProductAttentionDecomposition
from ovpasses.passes.shared_kv_cache_unsharing import SharedKVCacheUnsharing, UnsharedCache, plan_unsharing
from ovpasses.passes.shared_kv_detection import SharedKVCacheDetection

log = logging.getLogger(__name__)

RT_ACTION = "ovpasses_kv_action"
OLDEST_SUPPORTED = (2025, 2, 0)
FIRST_FIXED = (2026, 2, 0)

# actions, as reported per SDPA
NATIVE = "none: fused natively"
NATIVE_UNFUSED = "none: the plugin leaves this shared cache unfused"
UNANALYSED = "none: a sub-graph operation (not analysed) also reads this cache; left as it is"
STATELESS = "none: reads no cache"
SHAPEOF = "cache ShapeOf computed from the Concat inputs, so the plugin can fuse it"
BARRIER = "kept out of stateful fusion (no-op Reshape on K/V)"
DECOMPOSE = "decomposed (scale after MatMul(Q,K^T)): no other way to keep it out of fusion"
UNSHARED = "reads a KV cache of its own (unshared), so the plugin can fuse it"

# what rewrite(kv_sharing=...) does with caches that several SDPAs read
KV_SHARING_MODES = ("keep", "unshare")


@dataclass(frozen=True)
class RuntimeProfile:
    """What the pipeline changes for one OpenVINO runtime."""

    version: tuple[int, int, int]
    name: str                      # "affected" (2025.2 - 2026.1) or "fixed" (2026.2 and newer)
    decompose_cache_shapeof: bool  # KVCacheShapeOfDecomposition on every cache Concat's ShapeOf

    @property
    def version_string(self) -> str:
        return ".".join(map(str, self.version))


def profile_for(runtime: str | None = None) -> RuntimeProfile:
    """The profile of ``runtime`` (``"2026.0"``, ``"2026.4.1"``, ...) or, by default, the installed runtime."""
    version = runtime_version(runtime)
    if version < OLDEST_SUPPORTED:
        raise OvpassesError(f"openvino {'.'.join(map(str, version))} is older than the oldest supported "
                            f"release {'.'.join(map(str, OLDEST_SUPPORTED))}; install openvino>=2025.2")
    if version < FIRST_FIXED:
        return RuntimeProfile(version, "affected", decompose_cache_shapeof=True)
    return RuntimeProfile(version, "fixed", decompose_cache_shapeof=False)


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
    kv_sharing: str = "keep"
    unshared: list[UnsharedCache] = field(default_factory=list)   # the variables kv_sharing="unshare" added
    kept_shared: dict[str, str] = field(default_factory=dict)     # cache (for a borrower) -> why not unshared

    @property
    def changed(self) -> bool:
        return any(p.changed for p in self.passes)

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
            "passes": [{"name": p.name, "changed": list(p.changed), "seconds": round(p.seconds, 6)}
                       for p in self.passes],
            "unhandled": list(self.analysis.unhandled),
            "kv_sharing": self.kv_sharing,
            "unshared": [asdict(u) for u in self.unshared],
            "kept_shared": dict(self.kept_shared),
            "extra_cache_bytes_per_token": self.extra_cache_bytes_per_token,
        }

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
        if self.kv_sharing != "keep":
            lines.append(f"kv sharing: {self.kv_sharing}: {len(self.unshared)} caches added, "
                         f"{_bytes(self.extra_cache_bytes_per_token)} per token of context (batch 1)")
        for cache, reason in self.kept_shared.items():
            lines.append(f"kept shared: {cache}: {reason}")
        for message in self.analysis.unhandled:
            lines.append(f"not handled: {message}")
        return "\n".join(lines)


def _bytes(count: int | None) -> str:
    return "an unknown number of bytes (a dynamic head dimension)" if count is None else f"{count} bytes"


# the passes of the pipeline, in the order it runs them
PIPELINE_PASSES = (SharedKVCacheDetection.NAME, SharedKVCacheUnsharing.NAME, DisableStatefulSDPAFusion.NAME,
                   ScaledDotProductAttentionDecomposition.NAME, KVCacheShapeOfDecomposition.NAME)
SKIPPED = "not applied (pass {pass_} not selected); planned: {action}"


def selected_passes(passes: Iterable[str] | None) -> frozenset[str]:
    """The pass names ``passes`` selects (all when None); raises with the valid names on an unknown one."""
    selected = frozenset(PIPELINE_PASSES if passes is None else passes)
    unknown = sorted(selected - set(PIPELINE_PASSES))
    if unknown:
        raise OvpassesError(f"unknown pass{'es' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                            f"valid names: {', '.join(PIPELINE_PASSES)}")
    return selected


def rewrite(model: ov.Model, runtime: str | None = None, passes: Iterable[str] | None = None,
            kv_sharing: str = "keep") -> RewriteSummary:
    """Run the pipeline on ``model`` in place for ``runtime`` (default: the installed one).

    ``passes`` (names from :data:`PIPELINE_PASSES`) restricts it: the plan is made as usual for the
    runtime profile and each named pass does exactly what it does in the full pipeline; an SDPA whose
    planned change belongs to a pass that is not named is left as it is and its action says so. The
    analysis always runs (the plan needs it); naming SharedKVCacheDetection also writes its verdict
    into the SDPAs' runtime info. Without the barrier pass, the SDPAs planned for it are decomposed
    when ScaledDotProductAttentionDecomposition is named.

    ``kv_sharing="unshare"`` first gives each borrower of a shared cache a cache of its own
    (:class:`SharedKVCacheUnsharing`, planned by :func:`plan_unsharing`); the rest of the pipeline then
    plans on the model as it is afterwards. The summary's ``analysis`` stays what was detected in the
    input; ``unshared`` lists the caches added and what each costs per token.
    """
    _check_kv_sharing(kv_sharing)
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

    detected, unsharing = analysis, _Unsharing()
    if kv_sharing == "unshare":   # the rest of the pipeline plans on the model as it is afterwards
        analysis, sdpa_nodes, unsharing = _unshare(model, analysis, sdpa_nodes, selected, reports)

    actions = plan(analysis, profile)
    unsharing.update_actions(actions, analysis)
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
    if SharedKVCacheDetection.NAME in selected:
        _annotate(sdpa_nodes, actions)   # an SDPA the decomposition replaced is out of the model: harmless
    summary = RewriteSummary(profile, detected, actions, reports, kv_sharing, unsharing.unshared,
                             unsharing.kept_shared)
    log.info("ovpasses.rewrite: %s", str(summary).replace("\n", "; "))
    return summary


def compile_model(model: ov.Model, device: str = "CPU", config: dict | None = None, runtime: str | None = None,
                  core: ov.Core | None = None, kv_sharing: str = "keep") -> ov.CompiledModel:
    """Rewrite a clone of ``model`` for ``runtime`` (and ``kv_sharing``) and compile it on ``device`` (CPU or GPU)."""
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
    rewrite(clone, runtime, kv_sharing=kv_sharing)
    return core.compile_model(clone, device, config or {})


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
        if SharedKVCacheDetection.NAME in selected:   # its runtime info must describe the model as it is now
            detection = SharedKVCacheDetection()
            _run(model, detection)
            analysis, sdpa_nodes = detection.analysis, detection.sdpa_nodes
        else:
            ordered = model.get_ordered_ops()
            analysis = analyze_kv_sharing(model, ordered)
            sdpa_nodes = analysis.sdpa_nodes(ordered)
    reports.append(PassReport(SharedKVCacheUnsharing.NAME, [u.variable_id for u in step.unshared],
                              time.perf_counter() - start))
    return analysis, sdpa_nodes, step


def _behind_barrier(sdpa_nodes: dict[str, ov.Node], names: set[str]) -> set[str]:
    """The SDPAs among ``names`` whose K and V both come from a DisableStatefulSDPAFusion barrier (one made
    in memory, or read back from an IR file: see :func:`is_fusion_barrier`)."""
    return {name for name in names
            if all(is_fusion_barrier(sdpa_nodes[name].input_value(port).get_node()) for port in (1, 2))}


def _annotate(sdpa_nodes: dict[str, ov.Node], actions: dict[str, str]) -> None:
    for name, node in sdpa_nodes.items():
        if name in actions:
            node.get_rt_info()[RT_ACTION] = actions[name]
