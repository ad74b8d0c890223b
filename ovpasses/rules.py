"""One rule protocol: how every pass of the pipeline is built from the plan, refuses, and reports.

The plan gives each rule (pass) a :class:`RulePlan`: the nodes it is to change, each a :class:`Planned` with the
plan's reason, and the rule's own frozen plan data where it needs more than names (the caches to bound, the
padding, the unsharing targets). :func:`apply_rule` builds the pass from that part (:meth:`Rule.from_plan`), runs
it once, times it, and returns one :class:`RuleRecord` per planned node: applied, or refused with the reason the
pass gave through its ``refused`` (the same predicate its pattern uses: :func:`ovpasses.step.refusing`).

Every pass follows the protocol:

* ``NAME`` (what ``passes=`` names) and ``DESCRIPTION`` (one line for ``ovpass passes``);
* ``REANALYSES``: whether what it changes changes what the analyses saw (new SDPAs or caches, a mask, a
  ShapeOf, fusion); the pipeline analyses the model again after such a rule changed something, and only then;
* ``from_plan(part)``: the pass built from its part of the plan (:class:`Rule` gives the default: the planned
  nodes by friendly name, through the pass's node predicate);
* after it ran: ``changed`` (what it changed, in order: friendly names or variable ids) and ``refused``
  (name -> why it did not take a node it was given);
* ``outcome(planned)``: applied or refused, with the reason, for one planned node (default: the node's
  ``marks`` all in ``changed``; else the reason ``refused`` gives for one of them).

Like onnxscript's rewrite rule and match result (one way to build a rule, one way to refuse) and OpenVINO's
``Manager`` (one loop runs them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import openvino as ov
from openvino.passes import ModelPass

from ovpasses._strenum import StrEnum
from ovpasses.step import PassReport, run_built

NOT_MATCHED = "its pattern did not match"


class Status(StrEnum):
    """What a rule did with one node the plan gave it (the value is what the JSON carries)."""

    APPLIED = "applied"
    REFUSED = "refused"
    NOT_SELECTED = "not_selected"   # ``passes=`` left the rule out: the node is as it was


@dataclass(frozen=True)
class Planned:
    """One node of the plan: what the rule is given (``node``), why (``reason``), the action it carries out on
    the SDPAs ``sdpas`` (an :class:`~ovpasses.plan.decisions.Action` value, or None where the rule acts on no
    SDPA decision), the names its ``changed`` lists when it did (``marks``; default the node) and the rule that
    takes the node where this one refuses it (``fallback``)."""

    node: str
    reason: str = ""
    action: str | None = None
    sdpas: tuple[str, ...] = ()
    marks: tuple[str, ...] | None = None
    fallback: str | None = None
    handed_from: tuple[str, str] | None = None   # (action, rule) of the rule that handed it to this one

    @property
    def changed_names(self) -> tuple[str, ...]:
        return (self.node,) if self.marks is None else self.marks


@dataclass(frozen=True)
class RulePlan:
    """A rule's part of the plan: its planned nodes and, where it needs more, its own frozen plan ``data``."""

    rule: str
    nodes: tuple[Planned, ...] = ()
    data: object = None

    @property
    def names(self) -> frozenset[str]:
        return frozenset(p.node for p in self.nodes)

    def handed(self, nodes: tuple[Planned, ...]) -> RulePlan:
        """This part with ``nodes`` instead (a fallback rule handed what another refused)."""
        return RulePlan(self.rule, nodes, self.data)


@dataclass(frozen=True)
class RuleRecord:
    """What one rule did with one planned node."""

    rule: str
    node: str
    status: Status
    reason: str
    planned: Planned

    def to_dict(self) -> dict:
        return {"rule": self.rule, "node": self.node, "status": self.status.value, "reason": self.reason}


NodePredicate = Callable[[ov.Node], bool]


def by_name(names) -> NodePredicate:
    """The node predicate a pass takes: the nodes whose friendly names are ``names``."""
    names = frozenset(names)
    return lambda node: node.get_friendly_name() in names


class Rule:
    """The protocol's defaults, mixed into every pass (before OpenVINO's ``MatcherPass`` / ``ModelPass``)."""

    NAME: str = ""
    DESCRIPTION: str = ""
    REANALYSES: bool = False      # what it changes changes what the analyses saw: analyse again after it
    CHANGES_CACHES: bool = False  # it adds or bounds KV caches: the summary describes the caches it left
    WHOLE_MODEL: bool = False     # it takes every match in the model: it runs whenever its part exists
    ACTION: str | None = None     # the action it carries out (an SDPA's Action value; a lowering's Lowered)
    VALIDATES: bool = False       # it validates what it changed itself: no whole-model validation after it

    @classmethod
    def from_plan(cls, part: RulePlan) -> Rule:
        """The pass on the planned nodes (by friendly name)."""
        return cls(by_name(part.names))

    def outcome(self, planned: Planned) -> tuple[Status, str]:
        marks = planned.changed_names
        changed = set(self.changed)
        if all(m in changed for m in marks):
            return Status.APPLIED, planned.reason
        refused = getattr(self, "refused", {})
        reason = next((refused[m] for m in marks if m in refused), NOT_MATCHED)
        return Status.REFUSED, reason


class NamedNodesPass(Rule, ModelPass):
    """A whole-model pass given its planned nodes by friendly name (``names``): it records the nodes it changed
    (``changed``) and why it left the others (``refused``)."""

    @classmethod
    def from_plan(cls, part: RulePlan) -> NamedNodesPass:
        return cls(part.names)

    def __init__(self, names) -> None:
        ModelPass.__init__(self)
        self.names = frozenset(names)
        self.changed: list[str] = []
        self.refused: dict[str, str] = {}


def apply_rule(model: ov.Model, rule_class: type, part: RulePlan) -> tuple[Rule, PassReport, list[RuleRecord]]:
    """Build ``rule_class`` from ``part``, run it on ``model`` in place, and record what it did per planned node."""
    rule, report = run_built(model, lambda: rule_class.from_plan(part), validate=not rule_class.VALIDATES)
    records = []
    for planned in part.nodes:
        status, reason = rule.outcome(planned)
        records.append(RuleRecord(rule_class.NAME, planned.node, status, reason, planned))
    return rule, report, records


def not_selected(part: RulePlan) -> list[RuleRecord]:
    """``passes=`` left the rule out: every planned node is left as it is, and its record says so."""
    return [RuleRecord(part.rule, p.node, Status.NOT_SELECTED, p.reason, p) for p in part.nodes]
