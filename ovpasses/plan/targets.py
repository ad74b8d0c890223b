"""The facts a run plans from, the frozen plan, and the core's part of it: detection and fusion.

* :class:`Facts`: what the analyses say about the model as it is now. One value per *epoch*: the pipeline
  makes a new one only after a rule that declares ``REANALYSES`` changed the model; each analysis runs when
  first asked, once per epoch. The core's analyses are properties here; a feature's are named in its
  :class:`~ovpasses.plan.feature.Feature` (``facts.masks`` is found among them).
* :class:`RewritePlan`: the frozen plan of the SDPAs (per SDPA its :class:`~ovpasses.plan.decisions.Decision`),
  with each feature's section (``plan.mask_actions``), made by :func:`make_plan` from the facts after detection
  (and again after a step that re-plans: the unsharing). Nothing changes it: what the rules did is in their
  records, and :func:`decisions_after` reads the two together.
* One part builder per step (``facts, plan -> RulePlan | None``): the nodes the plan gives the rule, each with
  its reason, and the rule's own data. A feature's builders live in its home (``features/<feature>/plan.py``);
  those of the core (detection, the barrier and its fallback, the cache ShapeOf) are here, registered as
  :data:`CORE`. This module knows no feature by name (``tests/test_layout.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType

import openvino as ov

from ovpasses.analysis.attention_kinds import AttentionKind, attention_kinds
from ovpasses.analysis.kv_sharing import KVSharingAnalysis, analyze_kv_sharing
from ovpasses.analysis.sharing_lint import Finding, lint_kv_sharing
from ovpasses.passes.disable_stateful_sdpa_fusion import DisableStatefulSDPAFusion, is_fusion_barrier
from ovpasses.passes.kv_cache_shapeof_decomposition import KVCacheShapeOfDecomposition
from ovpasses.passes.sdpa_decomposition import ScaledDotProductAttentionDecomposition
from ovpasses.passes.shared_kv_detection import SharedKVCacheDetection
from ovpasses.plan.decisions import Action, Decision, plan_with_reasons
from ovpasses.plan.feature import Feature, Phase, Step
from ovpasses.rules import Planned, RulePlan, RuleRecord, Status

DECOMPOSITION = ScaledDotProductAttentionDecomposition.NAME   # the rule that takes what the barrier refuses


@dataclass(frozen=True, eq=False)
class Facts:
    """The analyses of ``model`` as it is now (one epoch), each run when first asked. ``features``: the registered
    features, whose named facts an attribute finds (``facts.masks``); ``kv_given``: the KV-sharing analysis the
    detection pass made of this same model, where it ran."""

    model: ov.Model
    options: object                 # the run's RewriteOptions (read by the part builders)
    features: tuple[Feature, ...] = ()
    kv_given: KVSharingAnalysis | None = None

    @cached_property
    def ordered(self) -> list[ov.Node]:
        return self.model.get_ordered_ops()

    @cached_property
    def by_type(self) -> dict[str, list[ov.Node]]:
        """The model's nodes by operation type, in topological order: one walk that the analyses looking for one
        type share (a walk of a 35-layer IR's 5,400 nodes costs 2-3 ms)."""
        found: dict[str, list[ov.Node]] = {}
        for node in self.ordered:
            found.setdefault(node.get_type_name(), []).append(node)
        return found

    @cached_property
    def kv(self) -> KVSharingAnalysis:
        return self.kv_given if self.kv_given is not None else analyze_kv_sharing(self.model, self.ordered)

    @cached_property
    def sdpa_nodes(self) -> dict[str, ov.Node]:
        return self.kv.sdpa_nodes(self.ordered)

    def __getattr__(self, name: str):
        """A feature's fact, computed when first asked and kept for the epoch (as a cached property is)."""
        for feature in self.__dict__.get("features", ()):
            if name in feature.facts:
                value = self.__dict__[name] = feature.facts[name](self)
                return value
        raise AttributeError(f"no analysis named {name!r}: neither the core's nor a registered feature's")

    def again(self, kv_given: KVSharingAnalysis | None = None, ordered: list[ov.Node] | None = None) -> Facts:
        """The facts of a new epoch of the same model (after a rule changed it, or after detection, which hands on
        its analysis and the ordered nodes it was made on)."""
        facts = Facts(self.model, self.options, self.features, kv_given)
        if ordered is not None:
            facts.__dict__["ordered"] = ordered   # the cached property's value: the analysis's indexes point into it
            # an analysis ran on the same model, unchanged: the nodes by type this epoch walked stay true
            if "by_type" in self.__dict__ and len(ordered) == len(self.ordered):
                facts.__dict__["by_type"] = self.__dict__["by_type"]
        return facts


@dataclass(frozen=True)
class RewritePlan:
    """The frozen plan of one model: per SDPA the decision and its reason, with the analysis it was made from
    (``analysis``) and the input's (``detected``); and each feature's section (``sections``: name -> plain data,
    read as attributes: ``plan.mask_actions``, ``plan.warnings``)."""

    detected: KVSharingAnalysis
    analysis: KVSharingAnalysis
    decisions: Mapping[str, Decision]
    kinds: Mapping[str, AttentionKind]
    findings: tuple[Finding, ...]
    sections: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))

    def __getattr__(self, name: str):
        sections = self.__dict__.get("sections")
        if sections is not None and name in sections:
            return sections[name]
        raise AttributeError(f"the plan has no section {name!r}")

    def with_sections(self, **sections) -> RewritePlan:
        return replace(self, sections=MappingProxyType({**self.sections, **sections}))


def make_plan(facts: Facts, detected: KVSharingAnalysis | None = None) -> RewritePlan:
    """Plan from ``facts`` (pure: reads the analyses only): the core's decisions, then each feature's section in
    the registry's order (a feature reads an earlier one's section by name). ``detected``: the input's analysis,
    where the plan is made again after a rule changed the caches."""
    detected = facts.kv if detected is None else detected
    kinds = attention_kinds(facts.sdpa_nodes)
    plan = RewritePlan(
        detected=detected, analysis=facts.kv,
        decisions=MappingProxyType(plan_with_reasons(facts.kv, facts.options.runtime)),
        kinds=MappingProxyType(kinds), findings=tuple(lint_kv_sharing(detected, kinds)))
    for feature in facts.features:
        if feature.plan is not None:
            plan = plan.with_sections(**feature.plan(facts, plan))
    return plan


def plan_again(plan: RewritePlan, facts: Facts) -> RewritePlan:
    """A step's ``replan`` where its rule changed which caches exist: the whole plan made again from the facts as
    they are, the input's analysis kept."""
    return make_plan(facts, detected=plan.detected)


def decisions_after(plan: RewritePlan, records: list[RuleRecord]) -> dict[str, Decision]:
    """Per SDPA, what the pipeline did (or, for a rule ``passes=`` left out, would have done) and why: the plan's
    decisions with the rules' records read in order. Pure.

    An applied record gives its SDPAs its action, with the plan's reason (an unshared borrower: where the plan,
    made again, left it to the plugin). A record of a node the rule handed to
    its fallback says nothing (the fallback's record does); where the fallback did not apply it either, the
    node keeps the first rule's action, marked as not carried out by it. A rule ``passes=`` left out marks its
    action as not carried out. A refused node keeps the plan's decision."""
    decisions = dict(plan.decisions)
    for record in records:
        planned = record.planned
        if planned.action is None:
            continue
        if record.status is Status.APPLIED:
            action, not_applied = Action(planned.action), None
        elif planned.fallback is not None:
            continue
        elif planned.handed_from is not None:
            action, not_applied = Action(planned.handed_from[0]), planned.handed_from[1]
        elif record.status is Status.NOT_SELECTED:
            action, not_applied = Action(planned.action), record.rule
        else:
            continue
        for name in planned.sdpas:
            old = decisions.get(name)
            if action is Action.UNSHARED and not_applied is None and not _left_to_the_plugin(plan, name, old):
                continue
            decisions[name] = Decision(action, old.reason if old else "", not_applied)
    return decisions


def _left_to_the_plugin(plan: RewritePlan, name: str, decision: Decision | None) -> bool:
    """An unshared borrower reads a cache of its own: its decision says so where the plan, made again after the
    unsharing, found its cache exclusive and left it to the plugin (else the plan's own decision stands)."""
    info = plan.analysis.sdpa.get(name)
    return info is not None and info.status == "exclusive" and decision is not None and decision.action == Action.NATIVE


# ------------------------------------------------------------------------------------- one part per step
def detection(_facts, _plan) -> RulePlan:
    """Always: the plan needs the analysis (the pass also writes its verdict into the SDPAs' runtime info)."""
    return RulePlan("SharedKVCacheDetection")


def fusion_barrier(facts: Facts, plan: RewritePlan) -> RulePlan:
    """The SDPAs planned for the barrier, but those an earlier run's barrier already keeps out (neither a second
    barrier nor the fallback); what the barrier refuses goes to the decomposition."""
    nodes = []
    for name, decision in plan.decisions.items():
        if decision.action != Action.BARRIER:
            continue
        node = facts.sdpa_nodes[name]
        if all(is_fusion_barrier(node.input_value(port).get_node()) for port in (1, 2)):
            continue
        nodes.append(Planned(name, decision.reason, Action.BARRIER.value, (name,), fallback=DECOMPOSITION))
    return RulePlan("DisableStatefulSDPAFusion", tuple(nodes))


def decomposition(_facts, _plan) -> RulePlan:
    """Nothing of its own: it takes what the barrier refuses (a K/V without a static rank-4 shape)."""
    return RulePlan(DECOMPOSITION)


def cache_shapeof(facts: Facts, plan: RewritePlan) -> RulePlan | None:
    if not facts.options.runtime.decompose_cache_shapeof:
        return None
    nodes = []
    for name, decision in plan.decisions.items():
        if decision.action == Action.SHAPEOF:
            shapeofs = tuple(s for vid in plan.analysis.sdpa[name].kv_variables
                             for s in plan.analysis.caches[vid].concat_shape_consumers)
            nodes.append(Planned(name, decision.reason, Action.SHAPEOF.value, (name,), marks=shapeofs))
    return RulePlan("KVCacheShapeOfDecomposition", tuple(nodes))


# The core's steps: detection (the plan is made after it), the fusion barrier, what it cannot take, the cache ShapeOf.
CORE = Feature(
    "core",
    steps=(
        Step(SharedKVCacheDetection, detection, Phase.DETECT, plans=True),
        Step(DisableStatefulSDPAFusion, fusion_barrier, Phase.FUSION),
        Step(ScaledDotProductAttentionDecomposition, decomposition, Phase.FUSION),   # what the barrier cannot take
        Step(KVCacheShapeOfDecomposition, cache_shapeof, Phase.FUSION),              # affected runtimes
    ),
)
