"""The runtime-aware pipeline: detect KV sharing, decide per runtime what to change, change it.

``rewrite(model)`` runs in place and returns a :class:`RewriteSummary`. What changes depends on the runtime profile
(see :func:`~ovpasses.plan.profiles.profile_for`, the facts in :mod:`ovpasses.plan.runtimes` and the table in
README.md), chosen from ``openvino.get_version()`` unless ``runtime`` names a release.

Analyse, plan, apply: the analyses of the model as it is are its facts (:class:`~ovpasses.plan.targets.Facts`);
the plan made from them is frozen (:class:`~ovpasses.plan.targets.RewritePlan`, decisions typed by
:mod:`ovpasses.plan.decisions`); :data:`STEPS` lists the rules (passes) in the order they run, each with the
builder of its part of the plan; one executor (:func:`execute`) builds each rule from its part
(:mod:`ovpasses.rules`), runs it, times it and records per planned node what it did.

The pipeline also makes the IR readable by the target: operations newer than the target reads
(:mod:`ovpasses.features.old_runtimes.analysis`) are constant-folded or converted into older operations where
that is exact (:mod:`ovpasses.features.old_runtimes.plan`), and otherwise :func:`rewrite` refuses with
:class:`~ovpasses.errors.UnreadableOperationError`.

The opt-in modes (``kv_sharing``, ``sliding_window``, ``paged_heads``, ``first_prompt``) are fields of
:class:`~ovpasses.options.RewriteOptions`; each is carried out by its feature's steps in :data:`STEPS`.
:func:`ovpasses.compiling.compile_model` rewrites a clone and compiles it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

import openvino as ov

from ovpasses.errors import UnreadableOperationError
from ovpasses.features.old_runtimes import plan as old_runtimes
from ovpasses.features.old_runtimes.plan import outcomes, refusal_message
from ovpasses.features.paged_heads import plan as paged_heads
from ovpasses.features.sdpa_recovery import plan as sdpa_recovery
from ovpasses.features.sliding_window import plan as sliding_window
from ovpasses.features.unfused_expands import plan as unfused_expands
from ovpasses.features.unsharing import plan as unsharing
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
    UnfusedSDPAExpandRewrite,
    BlockedFirstPrompt,
    SDPAReleasePoints,
    SDPAMaskExpandElimination,
)
from ovpasses.features.paged_heads.plan import PagedHeadsAction
from ovpasses.plan import targets
from ovpasses.rules import Planned, RulePlan, RuleRecord, Status, apply_rule, not_selected
from ovpasses.step import PassReport
from ovpasses.summary import RewriteSummary

log = logging.getLogger(__name__)

RT_ACTION = "ovpasses_kv_action"            # on each SDPA: its planned action (an Action value)
RT_NOT_APPLIED = "ovpasses_kv_not_applied"  # ... and, when passes= left it out, the pass that carries it out

@dataclass(frozen=True)
class Step:
    """One step of the pipeline: a rule (pass), on its part of the plan (:mod:`ovpasses.plan.targets`).
    ``replan``: after the rule changed the model, the plan made again from the facts as they are then."""

    rule: type
    part: Callable[[targets.Facts, targets.RewritePlan | None], RulePlan | None]
    replan: Callable[[targets.RewritePlan, targets.Facts], targets.RewritePlan] | None = None


def _plan_again(plan: targets.RewritePlan, facts: targets.Facts) -> targets.RewritePlan:
    return targets.make_plan(facts, detected=plan.detected)


# The pipeline, in the order it runs. Adding a pass is one line here (and its module, and its part of the plan).
STEPS: tuple[Step, ...] = (
    Step(EagerAttentionToSDPA, sdpa_recovery.recovery_part),              # IRs exported with eager attention
    Step(SharedKVCacheDetection, targets.detection),                      # the plan is made from its analysis
    Step(SharedKVCacheUnsharing, unsharing.unsharing_part, _plan_again),  # kv_sharing="unshare" only
    Step(AttentionHeadPadding, paged_heads.padding_part, targets.with_padded_heads),   # paged_heads="pad" only
    Step(DisableStatefulSDPAFusion, targets.fusion_barrier),
    Step(ScaledDotProductAttentionDecomposition, targets.decomposition),  # what the barrier cannot take
    Step(KVCacheShapeOfDecomposition, targets.cache_shapeof),             # affected runtimes
    Step(SlidingWindowMaskSliceInsertion, sliding_window.mask_slice_part),   # runtimes whose paged converter needs it
    Step(SlidingWindowKVCacheBounding, sliding_window.bounding_part),     # sliding_window="bounded" only
    Step(TrimmableSlidingWindowKVCache, sliding_window.trimming_part),    # sliding_window="trimmable" only
    Step(UnfusedSDPAExpandRewrite, unfused_expands.expand_part),          # the expands of the SDPAs left unfused
    Step(BlockedFirstPrompt, sliding_window.blocked_part),                # first_prompt="blocked" only
    Step(SDPAReleasePoints, sliding_window.release_part),                 # sliding_window="trimmable" only
    Step(SDPAMaskExpandElimination, sliding_window.mask_expand_part),     # sliding_window="trimmable" only
    Step(ErfInvConstantFolding, old_runtimes.lowering_part(ErfInvConstantFolding)),         # targets that cannot read ErfInv
    Step(ConvertOneHot16ToOneHot1, old_runtimes.lowering_part(ConvertOneHot16ToOneHot1)),   # ... OneHot-16
)
# The passes of the pipeline, in the order it runs them, with what each does in one line.
PASSES: dict[str, tuple[type, str]] = {s.rule.NAME: (s.rule, s.rule.DESCRIPTION) for s in STEPS}
PIPELINE_PASSES = tuple(PASSES)


def rewrite(model: ov.Model, runtime: str | None = None, passes: str | Iterable[str] | None = None,
            kv_sharing: str | None = None, sliding_window: str | None = None,
            sliding_window_margin: int | None = None, paged_heads: str | None = None,
            first_prompt: str | None = None, *, options: RewriteOptions | None = None) -> RewriteSummary:
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
                           paged_heads=paged_heads, first_prompt=first_prompt)
    summary = run_pipeline(model, options)
    if not summary.readable:
        refused = [a for a in summary.op_versions if not a.handled]
        raise UnreadableOperationError(refusal_message(summary.profile.version, refused),
                                       target=summary.profile.version, refused=refused)
    return summary


def run_pipeline(model: ov.Model, options: RewriteOptions | None = None) -> RewriteSummary:
    """:func:`rewrite` without the refusal: the summary says which operations the target still cannot
    read (``summary.readable``, ``summary.op_versions``). ``ovpass inspect`` reports from it."""
    options = options or RewriteOptions()
    summary = _summary(model, options, execute(model, options))
    if options.selects(SharedKVCacheDetection.NAME):
        _annotate(model, summary.decisions)
    log.info("ovpasses.rewrite: %r", summary)
    return summary


@dataclass(frozen=True)
class Execution:
    """What :func:`execute` did: the plan, each rule's part of it, the rules that ran, one record per planned
    node, the timed passes, and the facts the summary reports. It holds no node of the model: a node a rule
    replaced must be freed before the next analysis walks the graph (it would still be a consumer)."""

    plan: targets.RewritePlan
    parts: Mapping[str, RulePlan]
    rules: Mapping[str, object]
    records: tuple[RuleRecord, ...]
    passes: tuple[PassReport, ...]
    eager: tuple                # the eager attention subgraphs of the input
    op_before: object           # what the target could not read before the lowering rules
    after: object = None        # the KV-sharing analysis as the last rule that changed the caches left them

    @property
    def decisions(self) -> dict:
        return targets.decisions_after(self.plan, list(self.records))


def execute(model: ov.Model, options: RewriteOptions) -> Execution:
    """The one executor: per step, its part of the plan from the facts as they are; the rule built from it and
    run (or, left out by ``passes=``, a record per planned node that says so); what a rule refuses or leaves
    out goes to its fallback; the model is analysed again only after a rule that ``REANALYSES`` changed it."""
    facts = targets.Facts(model, options)
    eager = tuple(facts.eager)
    plan = None
    parts: dict[str, RulePlan] = {}
    rules: dict[str, object] = {}
    records: list[RuleRecord] = []
    passes: list[PassReport] = []
    handed: dict[str, list[Planned]] = {}
    actions = {step.rule.NAME: step.rule.ACTION for step in STEPS}
    after = None
    for step in STEPS:
        rule_class = step.rule
        part = step.part(facts, plan)
        if rule_class.NAME in handed:
            part = (part or RulePlan(rule_class.NAME)).handed(tuple(handed.pop(rule_class.NAME)))
        if part is None:
            continue
        parts[rule_class.NAME] = part
        if part.nodes or rule_class.WHOLE_MODEL:
            if options.selects(rule_class.NAME):
                rule, report, done = apply_rule(model, rule_class, part)
                passes.append(report)
                if getattr(rule, "analysis", None) is not None:   # an analysis hands its facts on (not its nodes)
                    facts = targets.Facts(model, options, kv_given=rule.analysis)
                else:
                    rules[rule_class.NAME] = rule
                    if rule_class.REANALYSES and rule.changed:
                        facts = targets.Facts(model, options)
                        if rule_class.CHANGES_CACHES:
                            after = facts.kv
                        if step.replan is not None:
                            plan = step.replan(plan, facts)
                rule = None   # the detection pass holds the SDPA nodes: none may outlive a rule that replaces one
            else:
                done = not_selected(part)
                if rule_class.WHOLE_MODEL and not part.nodes:   # an analysis left out: no time, nothing changed
                    passes.append(PassReport(rule_class.NAME, [], 0.0))
            records += done
            for record in done:
                fallback = record.planned.fallback
                if record.status is not Status.APPLIED and fallback is not None:
                    handed.setdefault(fallback, []).append(
                        replace(record.planned, action=actions[fallback], fallback=None,
                                handed_from=(record.planned.action, record.rule)))
        if plan is None and rule_class is SharedKVCacheDetection:
            plan = targets.make_plan(facts)
    return Execution(plan, MappingProxyType(parts), MappingProxyType(rules), tuple(records), tuple(passes),
                     eager, facts.op_before, after)


def _summary(model: ov.Model, options: RewriteOptions, run: Execution) -> RewriteSummary:
    """The run as the summary carries it: each feature's section from its part of the plan and its rule."""
    parts, rules, plan = run.parts, run.rules, run.plan
    decisions = run.decisions
    unshared, kept_shared = [], {}
    if (part := parts.get(SharedKVCacheUnsharing.NAME)) is not None:
        kept_shared = dict(part.data.refused)
        if (rule := rules.get(SharedKVCacheUnsharing.NAME)) is not None:
            unshared = list(rule.caches)
            kept_shared.update(rule.refused)
    heads = None
    warnings = list(plan.warnings)
    if (part := parts.get(AttentionHeadPadding.NAME)) is not None:
        heads = part.data
        if (rule := rules.get(AttentionHeadPadding.NAME)) is not None:
            heads = replace(heads, action=PagedHeadsAction.PADDED, changed=tuple(rule.changed))
        elif part.nodes:
            heads = replace(heads, action=PagedHeadsAction.NOT_SELECTED)
        if heads.action != PagedHeadsAction.NOT_SELECTED:
            warnings += heads.warnings()
    caches = next((parts[r.NAME].data for r in (SlidingWindowKVCacheBounding, TrimmableSlidingWindowKVCache)
                   if r.NAME in parts), None)
    eager = parts.get(EagerAttentionToSDPA.NAME)
    masks_not_applied = {r.node: r.rule for r in run.records
                         if r.rule == SlidingWindowMaskSliceInsertion.NAME and r.status is Status.NOT_SELECTED}
    refused = {name: getattr(rule, "refused", {}) for name, rule in rules.items()}
    lowered = outcomes(model, options.runtime.version, run.op_before, options.passes, refused)
    return RewriteSummary(
        options=options, analysis=plan.detected, decisions=decisions, passes=list(run.passes), kinds=dict(plan.kinds),
        findings=list(plan.findings), masks=list(plan.masks), mask_actions=dict(plan.mask_actions),
        masks_not_applied=masks_not_applied, warnings=warnings, op_versions=lowered,
        unshared=unshared, kept_shared=kept_shared,
        analysis_after=run.after if run.after is not None else (
            plan.analysis if plan.analysis is not plan.detected else None),
        sliding_window_caches=caches, paged_heads=heads, eager_attention=list(run.eager),
        recovered=list(rules[EagerAttentionToSDPA.NAME].changed) if EagerAttentionToSDPA.NAME in rules else [],
        eager_not_applied=(EagerAttentionToSDPA.NAME if eager is not None and eager.nodes
                           and EagerAttentionToSDPA.NAME not in rules else None),
        records=list(run.records))


def _annotate(model: ov.Model, decisions: Mapping) -> None:
    """Each SDPA's planned action (and the rule ``passes=`` left out) in its runtime info. ``get_ops``: no order is
    needed, and after a rule changed the model a topological sort costs 15 ms of a 35-layer IR's rewrite."""
    for node in model.get_ops():
        if node.get_type_name() == "ScaledDotProductAttention" and (decision := decisions.get(node.get_friendly_name())):
            node.get_rt_info()[RT_ACTION] = decision.action.value
            if decision.not_applied:
                node.get_rt_info()[RT_NOT_APPLIED] = decision.not_applied
