"""The runtime-aware pipeline: detect KV sharing, decide per runtime what to change, change it.

``rewrite(model)`` runs in place and returns a :class:`RewriteSummary`. What changes depends on the runtime profile
(see :func:`~ovpasses.plan.profiles.profile_for`, the facts in :mod:`ovpasses.plan.runtimes` and the table in
docs/runtimes.md), chosen from ``openvino.get_version()`` unless ``runtime`` names a release.

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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

import openvino as ov

from ovpasses.options import RewriteOptions, options_from
from ovpasses.passes import SharedKVCacheDetection
from ovpasses.plan import targets
from ovpasses.plan.feature import Step  # noqa: F401 - the type of STEPS, re-exported
from ovpasses.registry import FEATURES, STEPS
from ovpasses.rules import Planned, RulePlan, RuleRecord, Status, apply_rule, not_selected
from ovpasses.step import PassReport
from ovpasses.summary import RewriteSummary

log = logging.getLogger(__name__)

RT_ACTION = "ovpasses_kv_action"            # on each SDPA: its planned action (an Action value)
RT_NOT_APPLIED = "ovpasses_kv_not_applied"  # ... and, when passes= left it out, the pass that carries it out

# The pipeline, in the order it runs, is the registry's STEPS (ovpasses.registry: every feature's steps by phase).
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
    for feature in FEATURES:   # a feature refuses a result that cannot be used (an operation the target cannot read)
        if feature.refuse is not None and (error := feature.refuse(summary)) is not None:
            raise error
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
    kept: Mapping[str, object]   # the facts of the last epoch the features' summaries read (plain data)
    after: object = None         # the KV-sharing analysis as the last rule that changed the caches left them

    @property
    def decisions(self) -> dict:
        return targets.decisions_after(self.plan, list(self.records))


def execute(model: ov.Model, options: RewriteOptions) -> Execution:
    """The one executor: per step, its part of the plan from the facts as they are; the rule built from it and
    run (or, left out by ``passes=``, a record per planned node that says so); what a rule refuses or leaves
    out goes to its fallback; the model is analysed again only after a rule that ``REANALYSES`` changed it."""
    facts = targets.Facts(model, options, FEATURES)
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
                    facts = facts.again(kv_given=rule.analysis, ordered=rule.ordered)
                else:
                    rules[rule_class.NAME] = rule
                    if rule_class.REANALYSES and rule.changed:
                        facts = facts.again()
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
        if plan is None and step.plans:
            plan = targets.make_plan(facts)
    kept = {name: getattr(facts, name) for feature in FEATURES for name in feature.keeps}
    return Execution(plan, MappingProxyType(parts), MappingProxyType(rules), tuple(records), tuple(passes),
                     MappingProxyType(kept), after)


def _summary(model: ov.Model, options: RewriteOptions, run: Execution) -> RewriteSummary:
    """The run as the summary carries it: the core's fields, and each feature's section from its parts of the plan,
    its rules, its records and the facts it kept."""
    plan = run.plan
    fields = dict(
        options=options, analysis=plan.detected, decisions=run.decisions, passes=list(run.passes),
        kinds=dict(plan.kinds), findings=list(plan.findings), records=list(run.records),
        analysis_after=run.after if run.after is not None else (
            plan.analysis if plan.analysis is not plan.detected else None))
    for feature in FEATURES:
        if feature.summary is not None:
            fields.update(feature.summary(run, model, options))
    return RewriteSummary(**fields)


def _annotate(model: ov.Model, decisions: Mapping) -> None:
    """Each SDPA's planned action (and the rule ``passes=`` left out) in its runtime info. ``get_ops``: no order is
    needed, and after a rule changed the model a topological sort costs 15 ms of a 35-layer IR's rewrite."""
    for node in model.get_ops():
        if node.get_type_name() == "ScaledDotProductAttention" and (decision := decisions.get(node.get_friendly_name())):
            node.get_rt_info()[RT_ACTION] = decision.action.value
            if decision.not_applied:
                node.get_rt_info()[RT_NOT_APPLIED] = decision.not_applied
