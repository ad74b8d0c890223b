"""The runtime-aware pipeline: detect KV sharing, decide per runtime what to change, change it.

``rewrite(model)`` runs in place and returns a :class:`RewriteSummary`; ``compile_model(model)``
rewrites a clone and hands it to the CPU or GPU plugin. What changes depends on the runtime profile
(see :func:`~ovpasses.plan.profiles.profile_for`, the facts in :mod:`ovpasses.plan.runtimes` and the table in
README.md), chosen from ``openvino.get_version()`` unless ``runtime`` names a release. The plan
(:mod:`ovpasses.plan.decisions`) is typed data; :data:`STEPS` lists the passes in the order they run, each
on the nodes the plan gives it (:mod:`ovpasses.plan.targets`), and one loop (:func:`run_pipeline`) runs
them, times each and records what it changed.

The pipeline also makes the IR readable by the target: operations newer than the target reads
(:mod:`ovpasses.analysis.op_versions`) are constant-folded or converted into older operations where
that is exact (:mod:`ovpasses.lowering`), and otherwise :func:`rewrite` refuses with
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

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass

import openvino as ov

from ovpasses.devices import normalize_device, resolve_device
from ovpasses.errors import OvpassesError, UnreadableOperationError
from ovpasses.lowering import outcomes, refusal_message
from ovpasses.paged_padding import check_paged_heads
from ovpasses.passes import (
    AttentionHeadPadding,
    ConvertOneHot16ToOneHot1,
    DisableStatefulSDPAFusion,
    EagerAttentionToSDPA,
    ErfInvConstantFolding,
    KVCacheShapeOfDecomposition,
    ScaledDotProductAttentionDecomposition,
    SharedKVCacheDetection,
    SharedKVCacheUnsharing,
    SlidingWindowKVCacheBounding,
    SlidingWindowMaskSliceInsertion,
    TrimmableSlidingWindowKVCache,
)
from ovpasses.plan import targets
from ovpasses.plan.profiles import profile_for
from ovpasses.step import run_step
from ovpasses.summary import RewriteSummary

log = logging.getLogger(__name__)

RT_ACTION = "ovpasses_kv_action"            # on each SDPA: its planned action (an Action value)
RT_NOT_APPLIED = "ovpasses_kv_not_applied"  # ... and, when passes= left it out, the pass that carries it out

# what rewrite(kv_sharing=...) does with caches that several SDPAs read
KV_SHARING_MODES = ("keep", "unshare")
# what rewrite(sliding_window=...) does with caches that only sliding-window attention reads
SLIDING_WINDOW_MODES = ("full", "bounded", "trimmable")


@dataclass(frozen=True)
class Step:
    """One step of the pipeline: a pass, on the nodes the plan gives it (:class:`~ovpasses.plan.targets.Targets`)."""

    pass_class: type
    targets: targets.Targets


# The pipeline, in the order it runs. Adding a pass is one line here (and its module, and its Targets).
STEPS: tuple[Step, ...] = (
    Step(EagerAttentionToSDPA, targets.eager_recovery),                # IRs exported with eager attention
    Step(SharedKVCacheDetection, targets.detection),
    Step(SharedKVCacheUnsharing, targets.unsharing),                   # kv_sharing="unshare" only
    Step(AttentionHeadPadding, targets.head_padding),                  # paged_heads="pad" only
    Step(DisableStatefulSDPAFusion, targets.fusion_barrier),
    Step(ScaledDotProductAttentionDecomposition, targets.decomposition),   # what the barrier cannot take
    Step(KVCacheShapeOfDecomposition, targets.cache_shapeof),          # affected runtimes
    Step(SlidingWindowMaskSliceInsertion, targets.mask_slice),         # runtimes whose paged converter needs it
    Step(SlidingWindowKVCacheBounding, targets.cache_bounding),        # sliding_window="bounded" only
    Step(TrimmableSlidingWindowKVCache, targets.cache_trimming),       # sliding_window="trimmable" only
    Step(ErfInvConstantFolding, targets.lowering),                     # targets that cannot read ErfInv
    Step(ConvertOneHot16ToOneHot1, targets.lowering),                  # targets that cannot read OneHot-16
)
# The passes of the pipeline, in the order it runs them, with what each does in one line.
PASSES: dict[str, tuple[type, str]] = {s.pass_class.NAME: (s.pass_class, s.pass_class.DESCRIPTION) for s in STEPS}
PIPELINE_PASSES = tuple(PASSES)


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
            sliding_window_margin: int = 0, paged_heads: str = "keep") -> RewriteSummary:
    """Run the pipeline on ``model`` in place for ``runtime`` (default: the installed one).

    ``passes`` (names from :data:`PIPELINE_PASSES`: one name, ``"A,B"`` or a list; see
    :func:`selected_passes`) restricts it: the plan is made as usual for the runtime profile and each
    named pass does exactly what it does in the full pipeline; an SDPA whose
    planned change belongs to a pass that is not named is left as it is and its action says so. The
    analysis always runs (the plan needs it); naming SharedKVCacheDetection also writes its verdict
    into the SDPAs' runtime info. Without the barrier pass, the SDPAs planned for it are decomposed
    when ScaledDotProductAttentionDecomposition is named.

    When ``runtime`` names a release that cannot read some operation of the model (an ErfInv on
    2026.1, say), the operation is replaced where that is exact (:func:`ovpasses.lowering.lower_op_versions`); an
    operation that cannot be replaced raises :class:`UnreadableOperationError` naming it, its opset,
    the target and the first release that reads it. The model has been rewritten by then (in place,
    as always); the CLI writes nothing.

    ``kv_sharing="unshare"`` first gives each borrower of a shared cache a cache of its own
    (:class:`SharedKVCacheUnsharing`, planned by :func:`~ovpasses.passes.shared_kv_cache_unsharing.plan_unsharing`); the rest of the pipeline then
    plans on the model as it is afterwards. The summary's ``analysis`` stays what was detected in the
    input; ``unshared`` lists the caches added and what each costs per token.

    ``sliding_window="bounded"`` last bounds every cache that only sliding-window attention reads to its
    last W-1 positions (:class:`SlidingWindowKVCacheBounding`); ``sliding_window_caches`` says which, with
    their windows, and why the others are left whole. ``"full"`` (default) leaves every cache whole.
    ``sliding_window_margin`` positions more are kept, so that a client may take that many back (openvino_genai's
    stateful chat takes back each answer: measured on 2026.4.1, it needs a margin of the longest answer); a
    client that takes back more makes the inference fail, never decode from a cache that lost what the mask needs.

    ``paged_heads="pad"`` gives every KV cache and attention layer one KV-head count and head size
    (:class:`AttentionHeadPadding`), which the CPU PagedAttention of 2025.2 - 2026.2 needs; ``summary.paged_heads``
    says what it padded and the KV bytes per token before and after.
    """
    summary = run_pipeline(model, runtime, passes, kv_sharing, sliding_window, sliding_window_margin, paged_heads)
    if not summary.readable:
        raise UnreadableOperationError(refusal_message(summary.profile.version,
                                                       [a for a in summary.op_versions if not a.handled]))
    return summary


def run_pipeline(model: ov.Model, runtime: str | None = None, passes: str | Iterable[str] | None = None,
                 kv_sharing: str = "keep", sliding_window: str = "full",
                 sliding_window_margin: int = 0, paged_heads: str = "keep") -> RewriteSummary:
    """:func:`rewrite` without the refusal: the summary says which operations the target still cannot
    read (``summary.readable``, ``summary.op_versions``). ``ovpass inspect`` reports from it."""
    _check_modes(kv_sharing, sliding_window, sliding_window_margin)
    check_paged_heads(paged_heads)
    run = targets.Run(model, profile_for(runtime), selected_passes(passes), kv_sharing, sliding_window,
                      sliding_window_margin, paged_heads)
    for step in STEPS:
        args = step.targets.nodes(run, step.pass_class)
        if args is None:
            continue
        if step.pass_class.NAME not in run.selected:
            step.targets.skipped(run, step.pass_class, args)
            continue
        pass_, report = run_step(model, step.pass_class, args)
        run.passes.append(report)
        step.targets.done(run, pass_)
    if SharedKVCacheDetection.NAME in run.selected:
        _annotate(run)   # an SDPA the decomposition replaced is out of the model: harmless
    lowered = outcomes(model, run.profile.version, run.op_before, run.selected, run.op_refused)
    summary = RewriteSummary(
        run.profile, run.detected, run.decisions, run.passes, run.masks, run.mask_actions, run.masks_not_applied,
        run.warnings, run.kinds, run.findings, lowered,
        kv_sharing, run.unshared, run.kept_shared, run.analysis if run.analysis is not run.detected else None,
        sliding_window, run.caches, run.heads, run.eager, run.recovered, run.eager_not_applied)
    log.info("ovpasses.rewrite: %r", summary)
    return summary


def compile_model(model: ov.Model | str | os.PathLike, device: str = "CPU", config: dict | None = None,
                  runtime: str | None = None, core: ov.Core | None = None, kv_sharing: str = "keep",
                  sliding_window: str = "full", sliding_window_margin: int = 0,
                  paged_heads: str = "keep") -> ov.CompiledModel:
    """Rewrite a clone of ``model`` for ``runtime`` (and ``kv_sharing``, ``sliding_window``) and compile it on
    ``device`` (CPU or GPU).

    ``model`` is an ``ov.Model`` or, as for OpenVINO's own ``compile_model``, the path of a model file
    (read with ``core.read_model``; the ``ovpass`` application reads IRs through its file layer, which
    also checks the pair and waits for an ``ovpass`` writer's lock). ``device`` is any case in its family part (``"cpu"``,
    ``"gpu.0"``); one that OpenVINO does not see here raises :class:`DeviceNotAvailableError`.
    """
    core = core or ov.Core()
    name = normalize_device(device)
    if name.split(".")[0] not in ("CPU", "GPU"):
        raise OvpassesError(f"compile_model supports the CPU and GPU plugins, not '{device}'")
    name = resolve_device(device, core)
    if isinstance(model, (str, os.PathLike)):
        clone = core.read_model(os.fspath(model))
    elif isinstance(model, ov.Model):
        clone = model.clone()
    else:
        raise OvpassesError(f"compile_model takes an openvino.Model or the path of an IR .xml file, not "
                            f"{type(model).__name__}")
    rewrite(clone, runtime, kv_sharing=kv_sharing, sliding_window=sliding_window,
            sliding_window_margin=sliding_window_margin, paged_heads=paged_heads)
    return core.compile_model(clone, name, config or {})


def _check_modes(kv_sharing: str, sliding_window: str, sliding_window_margin: int) -> None:
    if kv_sharing not in KV_SHARING_MODES:
        raise OvpassesError(f"kv_sharing must be one of {', '.join(KV_SHARING_MODES)}, not {kv_sharing!r}")
    if sliding_window not in SLIDING_WINDOW_MODES:
        raise OvpassesError(f"sliding_window must be one of {', '.join(SLIDING_WINDOW_MODES)}, not {sliding_window!r}")
    if not isinstance(sliding_window_margin, int) or sliding_window_margin < 0:
        raise OvpassesError(f"sliding_window_margin must be a whole number of positions >= 0, not "
                            f"{sliding_window_margin!r}")


def _annotate(run: targets.Run) -> None:
    for name, node in run.sdpa_nodes.items():
        if name in run.decisions:
            decision = run.decisions[name]
            node.get_rt_info()[RT_ACTION] = decision.action.value
            if decision.not_applied:
                node.get_rt_info()[RT_NOT_APPLIED] = decision.not_applied
