"""The runtime-aware pipeline: detect KV sharing, decide per runtime what to change, change it.

``rewrite(model)`` runs in place and returns a :class:`RewriteSummary`; ``compile_model(model)``
rewrites a clone and hands it to the CPU or GPU plugin. What changes depends on the runtime profile
(see :func:`~ovpasses.plan.profiles.profile_for`, the facts in :mod:`ovpasses.plan.runtimes` and the table in
README.md), chosen from ``openvino.get_version()`` unless ``runtime`` names a release. The plan
(:mod:`ovpasses.plan.decisions`) is typed data; :data:`STEPS` lists the passes in the order they run, each
on the nodes the plan gives it (:mod:`ovpasses.plan.targets`), and one loop (:func:`run_pipeline`) runs
them, times each and records what it changed.

The pipeline also makes the IR readable by the target: operations newer than the target reads
(:mod:`ovpasses.features.old_runtimes.analysis`) are constant-folded or converted into older operations where
that is exact (:mod:`ovpasses.features.old_runtimes.plan`), and otherwise :func:`rewrite` refuses with
:class:`~ovpasses.errors.UnreadableOperationError`.

``kv_sharing="unshare"`` (opt-in) first gives each borrower of a shared
cache a cache of its own (:class:`~ovpasses.passes.SharedKVCacheUnsharing`), so that the plugin can fuse
every layer, at the memory the copies cost.

``sliding_window="bounded"`` (opt-in) last keeps every cache that only sliding-window attention reads to
its last W-1 positions (:class:`~ovpasses.passes.SlidingWindowKVCacheBounding`, planned by
:func:`~ovpasses.features.sliding_window.caches.analyze_sliding_window_caches`): the stateful path
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
from ovpasses.features.old_runtimes.plan import outcomes, refusal_message
from ovpasses.options import RewriteOptions, options_from
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
from ovpasses.step import run_step
from ovpasses.summary import RewriteSummary

log = logging.getLogger(__name__)

RT_ACTION = "ovpasses_kv_action"            # on each SDPA: its planned action (an Action value)
RT_NOT_APPLIED = "ovpasses_kv_not_applied"  # ... and, when passes= left it out, the pass that carries it out

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


def rewrite(model: ov.Model, runtime: str | None = None, passes: str | Iterable[str] | None = None,
            kv_sharing: str | None = None, sliding_window: str | None = None,
            sliding_window_margin: int | None = None, paged_heads: str | None = None, *,
            options: RewriteOptions | None = None) -> RewriteSummary:
    """Run the pipeline on ``model`` in place with ``options`` (:class:`RewriteOptions`; default: every pass, for
    the installed runtime, every mode at its default).

    The keywords ``runtime``, ``passes``, ``kv_sharing``, ``sliding_window``, ``sliding_window_margin`` and
    ``paged_heads`` are the fields of :class:`RewriteOptions`, taken for the callers written before it
    (``rewrite(model, "2026.0", kv_sharing="unshare")``); give either them or ``options``.

    ``passes`` (names from :data:`PIPELINE_PASSES`: one name, ``"A,B"`` or a list; see
    :func:`~ovpasses.options.parse_passes`) restricts it: the plan is made as usual for the runtime profile and each
    named pass does exactly what it does in the full pipeline; an SDPA whose
    planned change belongs to a pass that is not named is left as it is and its action says so. The
    analysis always runs (the plan needs it); naming SharedKVCacheDetection also writes its verdict
    into the SDPAs' runtime info. Without the barrier pass, the SDPAs planned for it are decomposed
    when ScaledDotProductAttentionDecomposition is named.

    When ``runtime`` names a release that cannot read some operation of the model (an ErfInv on
    2026.1, say), the operation is replaced where that is exact (:func:`ovpasses.features.old_runtimes.plan.lower_op_versions`); an
    operation that cannot be replaced raises :class:`UnreadableOperationError` naming it, its opset,
    the target and the first release that reads it. The model has been rewritten by then (in place,
    as always); the CLI writes nothing.

    ``kv_sharing="unshare"`` first gives each borrower of a shared cache a cache of its own
    (:class:`SharedKVCacheUnsharing`, planned by
    :func:`~ovpasses.features.unsharing.plan.plan_unsharing`); the rest of the pipeline then plans on the
    model as it is afterwards. The summary's ``analysis`` stays what was detected in the input;
    ``unshared`` lists the caches added and what each costs per token.

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
    options = options_from(options, runtime=runtime, passes=passes, kv_sharing=kv_sharing,
                           sliding_window=sliding_window, sliding_window_margin=sliding_window_margin,
                           paged_heads=paged_heads)
    summary = run_pipeline(model, options)
    if not summary.readable:
        refused = [a for a in summary.op_versions if not a.handled]
        raise UnreadableOperationError(refusal_message(summary.profile.version, refused),
                                       target=summary.profile.version, refused=refused)
    return summary


def run_pipeline(model: ov.Model, options: RewriteOptions | None = None) -> RewriteSummary:
    """:func:`rewrite` without the refusal: the summary says which operations the target still cannot
    read (``summary.readable``, ``summary.op_versions``). ``ovpass inspect`` reports from it."""
    run = targets.Run(model, options or RewriteOptions())
    for step in STEPS:
        args = step.targets.nodes(run, step.pass_class)
        if args is None:
            continue
        if not run.options.selects(step.pass_class.NAME):
            step.targets.skipped(run, step.pass_class, args)
            continue
        pass_, report = run_step(model, step.pass_class, args)
        run.passes.append(report)
        step.targets.done(run, pass_)
    if run.options.selects(SharedKVCacheDetection.NAME):
        _annotate(run)   # an SDPA the decomposition replaced is out of the model: harmless
    lowered = outcomes(model, run.profile.version, run.op_before, run.selected, run.op_refused)
    summary = RewriteSummary(
        options=run.options, analysis=run.detected, decisions=run.decisions, passes=run.passes, kinds=run.kinds,
        findings=run.findings, masks=run.masks, mask_actions=run.mask_actions,
        masks_not_applied=run.masks_not_applied, warnings=run.warnings, op_versions=lowered,
        unshared=run.unshared, kept_shared=run.kept_shared,
        analysis_after=run.analysis if run.analysis is not run.detected else None,
        sliding_window_caches=run.caches, paged_heads=run.heads, eager_attention=run.eager,
        recovered=run.recovered, eager_not_applied=run.eager_not_applied)
    log.info("ovpasses.rewrite: %r", summary)
    return summary


def compile_model(model: ov.Model | str | os.PathLike, device: str = "CPU", config: dict | None = None,
                  runtime: str | None = None, core: ov.Core | None = None, kv_sharing: str | None = None,
                  sliding_window: str | None = None, sliding_window_margin: int | None = None,
                  paged_heads: str | None = None, *, options: RewriteOptions | None = None) -> ov.CompiledModel:
    """Rewrite a clone of ``model`` with ``options`` (or the keywords that are its fields, as :func:`rewrite`
    takes them) and compile it on ``device`` (CPU or GPU).

    ``model`` is an ``ov.Model`` or, as for OpenVINO's own ``compile_model``, the path of a model file
    (read with ``core.read_model``; the ``ovpass`` application reads IRs through its file layer, which
    also checks the pair and waits for an ``ovpass`` writer's lock). ``device`` is any case in its family part (``"cpu"``,
    ``"gpu.0"``); one that OpenVINO does not see here raises :class:`DeviceNotAvailableError`.
    """
    options = options_from(options, runtime=runtime, kv_sharing=kv_sharing, sliding_window=sliding_window,
                           sliding_window_margin=sliding_window_margin, paged_heads=paged_heads)
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
    rewrite(clone, options=options)
    return core.compile_model(clone, name, config or {})


def _annotate(run: targets.Run) -> None:
    for name, node in run.sdpa_nodes.items():
        if name in run.decisions:
            decision = run.decisions[name]
            node.get_rt_info()[RT_ACTION] = decision.action.value
            if decision.not_applied:
                node.get_rt_info()[RT_NOT_APPLIED] = decision.not_applied
